package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type saItem struct {
	bun.BaseModel `bun:"table:bq_test_succeeded_at"`
	ID            int64 `bun:",pk"`
	Status        string
}

// attempts counts the runs of each row or job.
type attempts struct {
	mu sync.Mutex
	n  map[int64]int
}

// next counts a run of id and returns its number, from 1.
func (a *attempts) next(id int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[int64]int{}
	}
	a.n[id]++
	return a.n[id]
}

// succeeded reports whether a recent failure of queue's row key is marked
// succeeded: the client marks it after the commit that completed the row,
// which others may see first.
func succeeded(c *bunqueue.Client, queue, key string) bool {
	for _, f := range c.RecentFailures() {
		if f.Queue == queue && f.Key == key && !f.SucceededAt.IsZero() {
			return true
		}
	}
	return false
}

// requireSucceededAt checks the recent failures of queue: those of the
// row once (its key) have a SucceededAt after their At; those of the
// row always, at least two, have none.
func requireSucceededAt(t *testing.T, c *bunqueue.Client, queue, once, always string) {
	t.Helper()
	var onceSeen, alwaysSeen int
	for _, f := range c.RecentFailures() {
		switch {
		case f.Queue != queue:
		case f.Key == once:
			onceSeen++
			require.False(t, f.SucceededAt.IsZero(), "the row failed once, then completed: %+v", f)
			require.False(t, f.SucceededAt.Before(f.At), "%+v", f)
			require.WithinDuration(t, time.Now(), f.SucceededAt, time.Minute)
		case f.Key == always:
			alwaysSeen++
			require.True(t, f.SucceededAt.IsZero(), "the row keeps failing: %+v", f)
		}
	}
	require.Equal(t, 1, onceSeen)
	require.GreaterOrEqual(t, alwaysSeen, 2)
}

// Client.RecentFailures marks the failures of a row that this process
// completed later with SucceededAt, and leaves those of a row that keeps
// failing unmarked: a queue over a table, and jobs in lock and lease
// mode.
func TestRecentFailuresSucceededAt(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		t.Run("table", func(t *testing.T) {
			db := srv.Open(t, 0)
			srvTable(t, db, "bq_test_succeeded_at", "id BIGINT PRIMARY KEY, status VARCHAR(20) NOT NULL")
			dbtest.Exec(t, db, "INSERT INTO bq_test_succeeded_at (id, status) VALUES (1, 'waiting'), (2, 'waiting'), (3, 'waiting')")
			var runs attempts
			q := bunqueue.NewQueue("succeeded-at",
				func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
				func(ctx context.Context, tx bun.Tx, it *saItem) error {
					n := runs.next(it.ID)
					if it.ID == 2 || (it.ID == 1 && n == 1) {
						return fmt.Errorf("row %d fails (run %d)", it.ID, n)
					}
					_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
					return err
				}, &bunqueue.QueueConfig[saItem]{Cooldown: 20 * time.Millisecond})
			c := newClient(t, db, q)
			start(t, c)
			eventually(t, 20*time.Second, func() bool {
				twice := 0
				for _, f := range c.RecentFailures() {
					if f.Key == "id=2" {
						twice++
					}
				}
				return count(t, db, "SELECT COUNT(*) FROM bq_test_succeeded_at WHERE status = 'done'") == 2 && twice >= 2 &&
					succeeded(c, "succeeded-at", "id=1")
			}, "rows 1 and 3 done, row 2 failed twice")
			requireSucceededAt(t, c, "succeeded-at", "id=1", "id=2")
		})
		for name, mode := range map[string]bunqueue.JobMode{"lock": bunqueue.ModeLock, "lease": bunqueue.ModeLease} {
			t.Run(name, func(t *testing.T) {
				db, c, queue := ctlSetup(t, srv, mode)
				var runs attempts
				require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(_ context.Context, _ bun.IDB, job *bunqueue.Job[ctlArgs]) error {
					if runs.next(job.ID) == 1 || job.Args.N == 2 {
						return errors.New("the job fails")
					}
					return nil
				})))
				once := enqueueOne(t, c, db, ctlArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
				always := enqueueOne(t, c, db, ctlArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
				start(t, c)
				eventually(t, 30*time.Second, func() bool {
					return jobState(t, c, once) == bunqueue.JobStateCompleted && jobState(t, c, always) == bunqueue.JobStateFailed &&
						succeeded(c, queue, fmt.Sprintf("id=%d", once))
				}, "the first job completes on its second attempt, the other fails for good")
				requireSucceededAt(t, c, queue, fmt.Sprintf("id=%d", once), fmt.Sprintf("id=%d", always))
			})
		}
	})
}
