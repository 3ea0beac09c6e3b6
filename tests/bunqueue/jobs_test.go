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

// migrated opens the test database with the jobs tables in place.
func migrated(t *testing.T, maxConns int) *bun.DB {
	t.Helper()
	db := dbtest.Open(t, maxConns)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	return db
}

// jobQueue returns a queue name of the test's own, so tests sharing the
// jobs table do not take each other's jobs.
func jobQueue(t *testing.T) string {
	return dbtest.Name("q")
}

type smokeArgs struct {
	N int `json:"n"`
}

func (smokeArgs) Kind() string { return "smoke" }

func TestJobsSmoke(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			c, err := bunqueue.NewClient(db, &bunqueue.Config{
				PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2, Mode: mode, Lease: 2 * time.Second}},
			})
			require.NoError(t, err)
			var mu sync.Mutex
			got := map[int]int{}
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[smokeArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[smokeArgs]) error {
				mu.Lock()
				defer mu.Unlock()
				got[job.Args.N]++
				if job.Args.N == 3 && job.Attempt == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})))
			for i := range 5 {
				_, err := c.Enqueue(t.Context(), db, smokeArgs{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
				require.NoError(t, err)
			}
			start(t, c)
			eventually(t, 15*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
			}, "all jobs done")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 2, 4: 1}, got)
		})
	}
}
