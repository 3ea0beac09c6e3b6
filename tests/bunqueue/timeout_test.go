package bunqueue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type timeoutItem struct {
	bun.BaseModel `bun:"table:bq_test_timeout"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
}

type batchTimeoutItem struct {
	bun.BaseModel `bun:"table:bq_test_timeout_batch"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
}

const timeoutColumns = "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, INDEX (status, id)"

// timeoutMarker tags the SLEEPs of these tests in the server's process
// list.
const timeoutMarker = "bq_test_timeout_sleep"

// sleeping counts the statements marked with marker still running on
// the server.
func sleeping(t *testing.T, db *bun.DB, marker string) int {
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'"
	if dbtest.IsPostgres() {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE ? AND query NOT LIKE '%pg_stat_activity%'"
	}
	return count(t, db, q, "%"+marker+"%")
}

// failures records OnError's causes by row.
type failures struct {
	mu     sync.Mutex
	causes map[int64][]error
}

func (f *failures) add(id int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.causes == nil {
		f.causes = map[int64][]error{}
	}
	f.causes[id] = append(f.causes[id], err)
}

func (f *failures) of(id int64) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.causes[id]
}

// QueueConfig.Timeout bounds each handler call. A handler that hangs in
// SQL loses its transaction with its connection: the server session is
// ended at once (no waiting for the statement), and OnError records the
// failure in a transaction of its own. One that waits for its context
// fails as any handler does. One that returns nil after its Timeout has
// succeeded, unless its transaction was lost (it swallowed the error of a
// statement the timeout cut short). The other rows flow.
func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_timeout", timeoutColumns)
	dbtest.Exec(t, db, "INSERT INTO bq_test_timeout (id) VALUES (1), (2), (3), (4), (5), (6), (7), (8)")
	const timeout = 200 * time.Millisecond
	var failed failures
	q := bunqueue.NewQueue("timeout", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}, func(ctx context.Context, tx bun.Tx, it *timeoutItem) error {
		if _, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx); err != nil {
			return err
		}
		switch it.ID {
		case 2: // hangs in SQL
			_, err := tx.ExecContext(ctx, dbtest.Sleep(60)+" /* "+timeoutMarker+" */")
			return err
		case 4: // waits for its context
			<-ctx.Done()
			return ctx.Err()
		case 6: // ignores its context, returns nil late
			time.Sleep(2 * timeout)
		case 8: // hangs in SQL, swallows the error, returns nil
			_, _ = tx.ExecContext(ctx, dbtest.Sleep(60)+" /* "+timeoutMarker+" */")
		}
		return nil
	}, &bunqueue.QueueConfig[timeoutItem]{
		Workers: 2, BatchSize: 3, Timeout: timeout,
		OnError: func(ctx context.Context, tx bun.Tx, it *timeoutItem, err error) error {
			failed.add(it.ID, err)
			_, uerr := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
			return uerr
		},
	})
	start(t, newClient(t, db, q))
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_timeout WHERE status = 'waiting'") == 0
	}, "every row left the queue without waiting for the 60 s SLEEP")
	var rows []timeoutItem
	require.NoError(t, db.NewSelect().Model(&rows).Order("id").Scan(t.Context()))
	for _, r := range rows {
		want := "done"
		if r.ID == 2 || r.ID == 4 || r.ID == 8 {
			want = "failed"
			require.Equal(t, 1, r.Attempts, "row %d failed once", r.ID)
			causes := failed.of(r.ID)
			require.Len(t, causes, 1, "row %d", r.ID)
			require.ErrorIs(t, causes[0], context.DeadlineExceeded, "row %d", r.ID)
			require.ErrorContains(t, causes[0], "timed out after 200ms", "row %d", r.ID)
		}
		require.Equal(t, want, r.Status, "row %d", r.ID)
	}
	require.Contains(t, failed.of(2)[0].Error(), "transaction was lost")
	require.Contains(t, failed.of(8)[0].Error(), "transaction was lost", "nil from a handler whose transaction is gone is no success")
	eventually(t, 5*time.Second, func() bool { return sleeping(t, db, timeoutMarker) == 0 }, "the hung statement's session was ended")
}

// Without OnError, a row whose handler timed out in SQL is released and
// cools down; ProcessNext (no worker session) ends the server session too.
func TestProcessNextTimeoutInSQL(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_timeout_pn", timeoutColumns)
	dbtest.Exec(t, db, "INSERT INTO bq_test_timeout_pn (id) VALUES (1)")
	type item struct {
		bun.BaseModel `bun:"table:bq_test_timeout_pn"`
		ID            int64 `bun:",pk"`
		Status        string
	}
	q := bunqueue.NewQueue("timeout-pn", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}, func(ctx context.Context, tx bun.Tx, it *item) error {
		_, err := tx.ExecContext(ctx, dbtest.Sleep(60)+" /* "+timeoutMarker+" pn */")
		return err
	}, &bunqueue.QueueConfig[item]{Timeout: 100 * time.Millisecond})
	newClient(t, db, q)
	ok, err := q.ProcessNext(t.Context())
	require.True(t, ok)
	var ie *bunqueue.ItemError
	require.ErrorAs(t, err, &ie)
	require.False(t, ie.Recorded)
	require.Positive(t, ie.Cooldown, "the row cools down")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	eventually(t, 5*time.Second, func() bool {
		return sleeping(t, db, timeoutMarker+" pn") == 0
	}, "the hung statement's session was ended")
	eventually(t, 5*time.Second, func() bool { return len(relLocked(t, db, "SELECT id FROM bq_test_timeout_pn WHERE 1 = 1")) == 0 }, "the row is released")
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_timeout_pn WHERE id = 1"))
}

// A batch handler that times out in SQL loses the whole batch's
// transaction: the rows then run one by one, so that the hanging one fails
// alone (recorded by OnError) and the others succeed.
func TestBatchQueueTimeout(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_timeout_batch", timeoutColumns)
	dbtest.Exec(t, db, "INSERT INTO bq_test_timeout_batch (id) VALUES (1), (2), (3), (4), (5), (6)")
	var failed failures
	var mu sync.Mutex
	var calls [][]int64
	q := bunqueue.NewBatchQueue("timeout-batch", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}, func(ctx context.Context, tx bun.Tx, items []batchTimeoutItem) error {
		ids := make([]int64, len(items))
		for i, it := range items {
			ids[i] = it.ID
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		if _, err := tx.NewUpdate().Model((*batchTimeoutItem)(nil)).Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx); err != nil {
			return err
		}
		for _, id := range ids {
			if id == 3 {
				_, err := tx.ExecContext(ctx, dbtest.Sleep(60)+" /* "+timeoutMarker+" batch */")
				return err
			}
		}
		return nil
	}, &bunqueue.QueueConfig[batchTimeoutItem]{
		Workers: 1, BatchSize: 6, Timeout: 200 * time.Millisecond,
		OnError: func(ctx context.Context, tx bun.Tx, it *batchTimeoutItem, err error) error {
			failed.add(it.ID, err)
			_, uerr := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
			return uerr
		},
	})
	start(t, newClient(t, db, q))
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_timeout_batch WHERE status = 'waiting'") == 0
	}, "every row left the queue")
	var rows []batchTimeoutItem
	require.NoError(t, db.NewSelect().Model(&rows).Order("id").Scan(t.Context()))
	for _, r := range rows {
		if r.ID == 3 {
			require.Equal(t, "failed", r.Status)
			require.Equal(t, 1, r.Attempts)
			continue
		}
		require.Equal(t, "done", r.Status, "row %d", r.ID)
		require.Empty(t, failed.of(r.ID), "row %d did not fail", r.ID)
	}
	causes := failed.of(3)
	require.Len(t, causes, 1)
	require.True(t, errors.Is(causes[0], context.DeadlineExceeded), "%v", causes[0])
	mu.Lock()
	require.Greater(t, len(calls[0]), 1, "the first call had the whole batch: %v", calls)
	mu.Unlock()
	eventually(t, 5*time.Second, func() bool { return sleeping(t, db, timeoutMarker) == 0 }, "the hung statement's session was ended")
}
