package bunqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type orderTask struct {
	bun.BaseModel `bun:"table:bq_test_order"`
	ID            int64 `bun:",pk,autoincrement"`
	Priority      int
	Done          bool
}

func TestOrderIsHonouredWithOneWorker(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_order", "id BIGINT AUTO_INCREMENT PRIMARY KEY, priority INT NOT NULL, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, priority, id)")
	for _, p := range []int{1, 5, 3, 5, 2} {
		dbtest.Exec(t, db, "INSERT INTO bq_test_order (priority) VALUES ("+itoa(p)+")")
	}

	var mu sync.Mutex
	var seen []int64
	q := bunqueue.NewQueue("order",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("done = FALSE").Order("priority DESC", "id")
		},
		func(ctx context.Context, tx bun.Tx, r *orderTask) error {
			mu.Lock()
			seen = append(seen, r.ID)
			mu.Unlock()
			_, err := tx.NewUpdate().Model(r).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[orderTask]{Workers: 1})
	start(t, newClient(t, db, q))
	eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 5 }, "all five processed")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{2, 4, 3, 5, 1}, seen, "priority DESC, then id")
}

type lockedTask struct {
	bun.BaseModel `bun:"table:bq_test_locked"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestProcessNextSkipsALockedRow(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_locked", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_locked (id) VALUES (1), (2), (3)")

	query := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") }
	markDone := func(ctx context.Context, tx bun.Tx, r *lockedTask) error {
		_, err := tx.NewUpdate().Model(r).Set("done = TRUE").WherePK().Exec(ctx)
		return err
	}

	// Client A's handler holds row 1 until told to let go.
	holding, release := make(chan int64), make(chan struct{})
	qa := bunqueue.NewQueue("locked", query, func(ctx context.Context, tx bun.Tx, r *lockedTask) error {
		holding <- r.ID
		<-release
		return markDone(ctx, tx, r)
	}, nil)
	newClient(t, dbtest.Open(t, 0), qa)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ok, err := qa.ProcessNext(context.Background())
		require.True(t, ok)
		require.NoError(t, err)
	}()
	require.Equal(t, int64(1), <-holding)

	// Client B, with its own pool, gets row 2: not none, and not row 1.
	var got []int64
	qb := bunqueue.NewQueue("locked", query, func(ctx context.Context, tx bun.Tx, r *lockedTask) error {
		got = append(got, r.ID)
		return markDone(ctx, tx, r)
	}, nil)
	newClient(t, dbtest.Open(t, 0), qb)
	ok, err := qb.ProcessNext(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []int64{2}, got)

	close(release)
	wg.Wait()
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_test_locked WHERE done = FALSE"))
}

type countTask struct {
	bun.BaseModel `bun:"table:bq_test_count"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestCountExcludesLockedRowsAndCaps(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_count", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_count (id) VALUES (1), (2), (3), (4), (5), (6)",
		"UPDATE bq_test_count SET done = TRUE WHERE id = 6")
	q := bunqueue.NewQueue("count",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, r *countTask) error { return nil }, nil)
	newClient(t, db, q)

	n, err := q.Count(t.Context(), 100)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = q.Count(t.Context(), 3)
	require.NoError(t, err)
	require.Equal(t, 3, n, "capped at the limit")

	// Another session locks two waiting rows.
	tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(t.Context(), "SELECT id FROM bq_test_count WHERE id IN (1, 2) FOR UPDATE")
	require.NoError(t, err)
	n, err = q.Count(t.Context(), 100)
	require.NoError(t, err)
	require.Equal(t, 3, n, "locked rows are not counted")

	_, err = q.Count(t.Context(), 0)
	require.ErrorContains(t, err, "Count limit must be positive")
	_, err = bunqueue.NewQueue[countTask]("x", func(q *bun.SelectQuery) *bun.SelectQuery { return q }, func(context.Context, bun.Tx, *countTask) error { return nil }, nil).Count(t.Context(), 1)
	require.True(t, errors.Is(err, bunqueue.ErrNotAdded))
}
