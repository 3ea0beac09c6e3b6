package bunqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type killItem struct {
	bun.BaseModel `bun:"table:bq_test_kill"`
	ID            int64 `bun:",pk"`
	Status        string
	DoneBy        string
}

// A worker's connection is killed on the server while its handler runs:
// the server rolls its transaction back, and the row is processed once, by
// another worker.
func TestKilledConnectionReturnsTheRow(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_kill", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', done_by VARCHAR(16) NOT NULL DEFAULT '', INDEX (status, id)")
	createTable(t, db, "bq_test_kill_effect", "item_id BIGINT NOT NULL, worker VARCHAR(16) NOT NULL, UNIQUE KEY (item_id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_kill (id) VALUES (1)")

	process := func(who string) bunqueue.HandlerFunc[killItem] {
		return func(ctx context.Context, tx bun.Tx, it *killItem) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_kill_effect (item_id, worker) VALUES (?, ?)", it.ID, who); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").Set("done_by = ?", who).WherePK().Exec(ctx)
			return err
		}
	}
	query := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") }

	// Worker A: writes, then hangs (as a stalled host would) until killed.
	connID, release := make(chan int64, 1), make(chan struct{})
	a := bunqueue.NewQueue("kill", query, func(ctx context.Context, tx bun.Tx, it *killItem) error {
		connID <- dbtest.ConnectionID(t, tx)
		if err := process("A")(ctx, tx, it); err != nil {
			return err
		}
		<-release
		return nil
	}, nil)
	newClient(t, dbtest.Open(t, 0), a)
	var wg sync.WaitGroup
	var aErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, aErr = a.ProcessNext(context.Background())
	}()
	id := <-connID

	// Worker B runs in its own client, as another process would.
	var bCalls int
	var mu sync.Mutex
	b := bunqueue.NewQueue("kill", query, func(ctx context.Context, tx bun.Tx, it *killItem) error {
		mu.Lock()
		bCalls++
		mu.Unlock()
		return process("B")(ctx, tx, it)
	}, &bunqueue.QueueConfig[killItem]{Workers: 2})
	start(t, newClient(t, dbtest.Open(t, 0), b))
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_kill WHERE id = 1"), "B must not get the row while A holds it")

	dbtest.Exec(t, db, dbtest.KillSQL(id))
	eventually(t, 10*time.Second, func() bool {
		return str(t, db, "SELECT status FROM bq_test_kill WHERE id = 1") == "done"
	}, "B processes the row once A's connection is gone")
	close(release)
	wg.Wait()
	require.Error(t, aErr, "A's commit cannot succeed on a killed connection")

	require.Equal(t, "B", str(t, db, "SELECT done_by FROM bq_test_kill WHERE id = 1"))
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_test_kill_effect"))
	require.Equal(t, "B", str(t, db, "SELECT worker FROM bq_test_kill_effect"))
	mu.Lock()
	require.Equal(t, 1, bCalls)
	mu.Unlock()
}
