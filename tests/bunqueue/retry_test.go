package bunqueue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type deadlockItem struct {
	bun.BaseModel `bun:"table:bq_test_deadlock"`
	ID            int64 `bun:",pk"`
	Status        string
}

// Two handlers lock two rows in opposite orders: a real deadlock (1213).
// The server rolls one transaction back; the engine retries it whole, so
// each item's writes land exactly once.
func TestDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_deadlock", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_deadlock_res", "name VARCHAR(8) PRIMARY KEY, n INT NOT NULL")
	dbtest.Exec(t, db, "INSERT INTO bq_test_deadlock (id) VALUES (1), (2)",
		"INSERT INTO bq_test_deadlock_res VALUES ('x', 0), ('y', 0)")

	var calls atomic.Int64
	var first sync.WaitGroup
	first.Add(2)
	var firstOnce [3]sync.Once
	q := bunqueue.NewQueue("deadlock",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *deadlockItem) error {
			calls.Add(1)
			order := []string{"x", "y"}
			if it.ID == 2 {
				order = []string{"y", "x"}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE bq_test_deadlock_res SET n = n + 1 WHERE name = ?", order[0]); err != nil {
				return err
			}
			// On the first attempt, wait until both hold their first row.
			firstOnce[it.ID].Do(func() {
				first.Done()
				first.Wait()
			})
			if _, err := tx.ExecContext(ctx, "UPDATE bq_test_deadlock_res SET n = n + 1 WHERE name = ?", order[1]); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[deadlockItem]{Workers: 2})
	start(t, newClient(t, db, q))
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_deadlock WHERE status = 'done'") == 2
	}, "both items done")
	require.Equal(t, int64(3), calls.Load(), "the deadlock victim ran once more")
	require.Equal(t, 2, count(t, db, "SELECT n FROM bq_test_deadlock_res WHERE name = 'x'"), "each item's writes exactly once")
	require.Equal(t, 2, count(t, db, "SELECT n FROM bq_test_deadlock_res WHERE name = 'y'"))
}

type lockWaitItem struct {
	bun.BaseModel `bun:"table:bq_test_lockwait"`
	ID            int64 `bun:",pk"`
	Status        string
}

// A handler's write waits on a row another session holds and times out
// (1205). InnoDB rolls back only that statement; the engine rolls back the
// whole transaction and retries it, and it succeeds once the row is free.
func TestLockWaitTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_lockwait", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_lockwait_res", "name VARCHAR(8) PRIMARY KEY, n INT NOT NULL")
	dbtest.Exec(t, db, "INSERT INTO bq_test_lockwait (id) VALUES (1)",
		"INSERT INTO bq_test_lockwait_res VALUES ('x', 0)")

	// Another session holds the resource row.
	holder, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(t.Context(), "UPDATE bq_test_lockwait_res SET n = n + 100 WHERE name = 'x'")
	require.NoError(t, err)

	var calls atomic.Int64
	q := bunqueue.NewQueue("lockwait",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *lockWaitItem) error {
			if calls.Add(1) == 2 {
				// The first attempt has timed out: let the row go.
				require.NoError(t, holder.Rollback())
			}
			lockWait := "SET SESSION innodb_lock_wait_timeout = 1"
			if isPG(tx) {
				lockWait = "SET LOCAL lock_timeout = '1s'"
			}
			if _, err := tx.ExecContext(ctx, lockWait); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE bq_test_lockwait_res SET n = n + 1 WHERE name = 'x'"); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, nil)
	newClient(t, dbtest.Open(t, 0), q)
	ok, err := q.ProcessNext(t.Context())
	require.True(t, ok)
	require.NoError(t, err, "the 1205 was retried")
	require.Equal(t, int64(2), calls.Load())
	require.Equal(t, 1, count(t, db, "SELECT n FROM bq_test_lockwait_res WHERE name = 'x'"))
	require.Equal(t, "done", str(t, db, "SELECT status FROM bq_test_lockwait WHERE id = 1"))
}
