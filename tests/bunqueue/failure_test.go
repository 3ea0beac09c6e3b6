package bunqueue_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// retryItem follows the seed's pattern: attempts and retry_at on the row.
type retryItem struct {
	bun.BaseModel `bun:"table:bq_test_retry"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
	RetryAt       *time.Time
}

func retryQuery(q *bun.SelectQuery) *bun.SelectQuery {
	return q.Where("status = 'waiting'").
		Where("retry_at IS NULL OR retry_at <= " + nowSQL(q)).
		Order("id")
}

// recordRetry is the OnError of the seed: one more attempt, retry in an
// hour, computed with the database clock.
func recordRetry(ctx context.Context, tx bun.Tx, it *retryItem, _ error) error {
	_, err := tx.NewUpdate().Model(it).
		Set("attempts = attempts + 1").
		Set("retry_at = " + plusSQL(tx, time.Hour)).
		WherePK().Exec(ctx)
	return err
}

func TestOnErrorRecordsAttemptsAndRetryAt(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_retry", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, retry_at DATETIME(6) NULL, INDEX (status, id)")
	createTable(t, db, "bq_test_retry_effect", "item_id BIGINT NOT NULL")
	dbtest.Exec(t, db, "INSERT INTO bq_test_retry (id) VALUES (1), (2), (3), (4), (5)")

	handler := func(ctx context.Context, tx bun.Tx, it *retryItem) error {
		// A write before the failure: it must be undone.
		if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_retry_effect (item_id) VALUES (?)", it.ID); err != nil {
			return err
		}
		if it.ID%2 == 0 {
			return errors.New("smtp: mailbox unavailable")
		}
		_, err := tx.NewUpdate().Model(it).Set("status = 'sent'").WherePK().Exec(ctx)
		return err
	}

	t.Run("ProcessNext", func(t *testing.T) {
		// Rows 1 and 2; row 2 fails in a transaction of one.
		q := bunqueue.NewQueue("retry", retryQuery, handler, &bunqueue.QueueConfig[retryItem]{OnError: recordRetry})
		newClient(t, db, q)
		ok, err := q.ProcessNext(t.Context())
		require.True(t, ok)
		require.NoError(t, err)
		ok, err = q.ProcessNext(t.Context())
		require.True(t, ok)
		var ie *bunqueue.ItemError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "id=2", ie.Key)
		require.True(t, ie.Recorded)
		require.ErrorContains(t, err, "mailbox unavailable")
		require.ErrorContains(t, err, `queue "retry"`)
	})

	t.Run("Batch", func(t *testing.T) {
		// Rows 3, 4, 5 in one batch; row 4 fails inside its savepoint.
		q := bunqueue.NewQueue("retry", retryQuery, handler, &bunqueue.QueueConfig[retryItem]{OnError: recordRetry, BatchSize: 10})
		start(t, newClient(t, db, q))
		eventually(t, 10*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_test_retry WHERE status = 'sent'") == 3
		}, "rows 1, 3 and 5 are sent")
	})

	require.Equal(t, 1, count(t, db, "SELECT attempts FROM bq_test_retry WHERE id = 2"))
	require.Equal(t, 1, count(t, db, "SELECT attempts FROM bq_test_retry WHERE id = 4"))
	require.Equal(t, 2, count(t, db, "SELECT COUNT(*) FROM bq_test_retry WHERE status = 'waiting' AND retry_at > "+plusSQL(db, 59*time.Minute)),
		"retry_at an hour ahead, by the database clock")
	require.Equal(t, []int64{1, 3, 5}, ids(t, db, "SELECT item_id FROM bq_test_retry_effect ORDER BY item_id"),
		"the failed handlers' writes were undone")

	// Rows whose retry_at is in the future are not claimed.
	q := bunqueue.NewQueue("retry", retryQuery, handler, nil)
	newClient(t, db, q)
	ok, err := q.ProcessNext(t.Context())
	require.NoError(t, err)
	require.False(t, ok, "a row waiting for its retry_at was claimed")

	// Once the database clock passes retry_at, they are claimed again.
	dbtest.Exec(t, db, "UPDATE bq_test_retry SET retry_at = "+plusSQL(db, -time.Second)+" WHERE id = 4")
	ok, err = q.ProcessNext(t.Context())
	require.True(t, ok)
	require.ErrorContains(t, err, "mailbox unavailable")
}

type stuckItem struct {
	bun.BaseModel `bun:"table:bq_test_stuck"`
	ID            int64 `bun:",pk"`
	Status        string
}

// A handler that forgets to change its row: the error names the queue and
// the rule, the handler's writes are undone, and the row is not looped.
func TestHandlerThatKeepsItsRowIsReportedNotLooped(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_stuck", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_stuck_effect", "item_id BIGINT NOT NULL")
	dbtest.Exec(t, db, "INSERT INTO bq_test_stuck (id) VALUES (1)")

	var calls atomic.Int64
	handler := func(ctx context.Context, tx bun.Tx, it *stuckItem) error {
		calls.Add(1)
		_, err := tx.ExecContext(ctx, "INSERT INTO bq_test_stuck_effect (item_id) VALUES (?)", it.ID)
		return err // forgot: UPDATE ... SET status = 'done'
	}
	query := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") }

	q := bunqueue.NewQueue("stuck", query, handler, nil)
	newClient(t, db, q)
	ok, err := q.ProcessNext(t.Context())
	require.True(t, ok)
	require.ErrorIs(t, err, bunqueue.ErrStillQueued)
	require.ErrorContains(t, err, `queue "stuck"`)
	require.ErrorContains(t, err, "must change the row")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bq_test_stuck_effect"), "its writes were rolled back")

	// Workers: over 1.5 s with a 200 ms cooldown the row is tried a handful
	// of times (0, 0.2, 0.6, 1.4 s), not thousands.
	calls.Store(0)
	cooled := bunqueue.NewQueue("stuck", query, handler, &bunqueue.QueueConfig[stuckItem]{Workers: 4, Cooldown: 200 * time.Millisecond})
	start(t, newClient(t, dbtest.Open(t, 0), cooled))
	time.Sleep(1500 * time.Millisecond)
	n := calls.Load()
	t.Logf("%d calls in 1.5 s", n)
	require.GreaterOrEqual(t, n, int64(1))
	require.LessOrEqual(t, n, int64(6), "the row was retried in a hot loop")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bq_test_stuck_effect"))
}

type stuckBatchItem struct {
	bun.BaseModel `bun:"table:bq_test_stuck_batch"`
	ID            int64 `bun:",pk"`
	Status        string
}

type stuckBatchWriteItem struct {
	bun.BaseModel `bun:"table:bq_test_stuck_batch_w"`
	ID            int64 `bun:",pk"`
	Status        string
}

// In a batch, a row that stays in the queue is rolled back to its
// savepoint; rows before it commit, rows after it return to the queue and
// are processed later. A row that stays in the queue without having run a
// statement took no savepoint and has nothing to undo: the rows after it
// commit.
func TestStuckRowInABatch(t *testing.T) {
	t.Parallel()
	t.Run("it writes nothing", func(t *testing.T) {
		t.Parallel()
		testStuckRowInABatch[stuckBatchItem](t, "bq_test_stuck_batch", false,
			func(it *stuckBatchItem) int64 { return it.ID }, map[int64]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 1})
	})
	t.Run("it writes", func(t *testing.T) {
		t.Parallel()
		testStuckRowInABatch[stuckBatchWriteItem](t, "bq_test_stuck_batch_w", true,
			func(it *stuckBatchWriteItem) int64 { return it.ID }, map[int64]int{1: 1, 2: 1, 3: 1, 4: 2, 5: 2})
	})
}

// testStuckRowInABatch runs rows 1 to 5 of table in one batch, row 3's
// handler forgetting to change its row (after a write of its own if
// writes), and checks each row's handler calls.
func testStuckRowInABatch[T any](t *testing.T, table string, writes bool, id func(*T) int64, want map[int64]int) {
	db := dbtest.Open(t, 0)
	createTable(t, db, table, "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', note VARCHAR(16), INDEX (status, id)")
	dbtest.Exec(t, db, "INSERT INTO "+table+" (id) VALUES (1), (2), (3), (4), (5)")
	var mu sync.Mutex
	calls := map[int64]int{}
	q := bunqueue.NewQueue("stuck-batch",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *T) error {
			mu.Lock()
			calls[id(it)]++
			mu.Unlock()
			switch {
			case id(it) == 3 && writes:
				// Writes, but forgets to change the status.
				_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET note = 'touched' WHERE id = 3")
				return err
			case id(it) == 3:
				return nil // forgets to change row 3
			}
			_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET status = 'done' WHERE id = ?", id(it))
			return err
		}, &bunqueue.QueueConfig[T]{Workers: 1, BatchSize: 10, Cooldown: time.Hour})
	start(t, newClient(t, db, q))
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE status = 'done'") == 4
	}, "rows 1, 2, 4, 5 done")
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, calls, "rows after a stuck one that wrote were undone with it and ran again; row 3 cooled down")
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM "+table+" WHERE id = 3"))
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE note IS NOT NULL"), "row 3's write was undone")
}

type panicItem struct {
	bun.BaseModel `bun:"table:bq_test_panic"`
	ID            int64 `bun:",pk"`
	Status        string
}

func TestPanicIsAnErrorAndTheWorkerSurvives(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_panic", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_panic (id) VALUES (1), (2), (3), (4), (5)")
	handler := func(ctx context.Context, tx bun.Tx, it *panicItem) error {
		if _, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx); err != nil {
			return err
		}
		if it.ID == 2 {
			panic("boom")
		}
		return nil
	}
	query := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") }

	single := bunqueue.NewQueue("panic", query, handler, nil)
	newClient(t, db, single)
	ok, err := single.ProcessNext(t.Context())
	require.True(t, ok)
	require.NoError(t, err)
	ok, err = single.ProcessNext(t.Context())
	require.True(t, ok)
	var pe *bunqueue.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.NotEmpty(t, pe.Stack)
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_panic WHERE id = 2"), "the panicking handler's update was undone")

	// One worker, batches of 10: row 2 panics (it is cooling down in the
	// first client, not this one), 3, 4 and 5 commit in the same batch, and
	// the worker goes on to rows added later.
	batched := bunqueue.NewQueue("panic", query, handler, &bunqueue.QueueConfig[panicItem]{BatchSize: 10, Cooldown: time.Hour})
	start(t, newClient(t, dbtest.Open(t, 0), batched))
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_panic WHERE status = 'done'") == 4
	}, "the others of the batch commit")
	dbtest.Exec(t, db, "INSERT INTO bq_test_panic (id) VALUES (6)")
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_panic WHERE status = 'done'") == 5
	}, "the worker survived the panic")
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_panic WHERE id = 2"))
}

func ids(t *testing.T, db bun.IDB, query string) []int64 {
	t.Helper()
	var out []int64
	require.NoError(t, db.NewRaw(query).Scan(context.Background(), &out))
	return out
}

func str(t *testing.T, db bun.IDB, query string) string {
	t.Helper()
	var s string
	require.NoError(t, db.NewRaw(query).Scan(context.Background(), &s))
	return s
}

type recordItem struct {
	bun.BaseModel `bun:"table:bq_test_record"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
	RetryAt       *time.Time
}

// With several workers and batches of one, every failure reaches OnError
// while the row is still locked: no other worker can take the row between
// the failure and its record.
func TestEveryFailureIsRecordedUnderConcurrency(t *testing.T) {
	t.Parallel()
	const rows = 300
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_record", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, retry_at DATETIME(6) NULL, INDEX (status, id)")
	for i := 1; i <= rows; i++ {
		dbtest.Exec(t, db, "INSERT INTO bq_test_record (id) VALUES ("+itoa(i)+")")
	}
	var calls, failures, recorded atomic.Int64
	q := bunqueue.NewQueue("record",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").Where("retry_at IS NULL OR retry_at <= " + nowSQL(q)).Order("id")
		},
		func(ctx context.Context, tx bun.Tx, it *recordItem) error {
			calls.Add(1)
			if it.ID%2 == 0 {
				failures.Add(1)
				return errors.New("flaky")
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'sent'").WherePK().Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[recordItem]{Workers: 4, OnError: func(ctx context.Context, tx bun.Tx, it *recordItem, _ error) error {
			recorded.Add(1)
			_, err := tx.NewUpdate().Model(it).
				Set("attempts = attempts + 1").
				Set("retry_at = " + plusSQL(tx, time.Hour)).
				WherePK().Exec(ctx)
			return err
		}})
	start(t, newClient(t, db, q))
	eventually(t, 30*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_record WHERE status = 'waiting' AND retry_at IS NULL") == 0
	}, "every row tried")
	require.Equal(t, int64(rows), calls.Load(), "a failed row was taken again before its failure was recorded")
	require.Equal(t, int64(rows/2), failures.Load())
	require.Equal(t, int64(rows/2), recorded.Load())
	require.Equal(t, rows/2, count(t, db, "SELECT SUM(attempts) FROM bq_test_record"))
}
