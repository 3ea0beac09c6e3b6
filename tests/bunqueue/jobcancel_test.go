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

// cancelRace is what the cancel race saw: the runs of each job and the
// jobs that JobCancel cancelled, each event numbered in the order it
// happened.
type cancelRace struct {
	seq       atomic.Int64
	mu        sync.Mutex
	runs      map[int64][]int64           // job id: the number of each start of its handler
	cancelled map[int64]int64             // job id: the number after JobCancel returned
	was       map[int64]bunqueue.JobState // job id: the state JobCancel found
}

func (r *cancelRace) ran(id int64) {
	n := r.seq.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[id] = append(r.runs[id], n)
}

func (r *cancelRace) cancel(t *testing.T, c *bunqueue.Client, id int64) {
	was, err := c.JobCancel(context.Background(), id)
	n := r.seq.Add(1)
	switch {
	case err == nil:
		r.mu.Lock()
		r.cancelled[id], r.was[id] = n, was
		r.mu.Unlock()
	case errors.Is(err, bunqueue.ErrJobNotFound), errors.Is(err, bunqueue.ErrJobRunning):
		// It ran and completed, or it runs (lock mode).
	default:
		t.Errorf("JobCancel %d: %v", id, err)
	}
}

// Several clients on pools of their own run a queue's jobs while
// JobCancel cancels every other one: a job that JobCancel found waiting
// (pending, or retrying) never runs after it returned; no job runs twice;
// every job ran or was cancelled. The lease is long, so that a heartbeat
// that SQLite's write lock holds up under -race does not let a lease run
// out and its job run again, as lease mode lets it.
func TestJobCancelRace(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) { cancelRaceOn(t, srv, mode) })
		}
	})
}

func cancelRaceOn(t *testing.T, srv dbtest.Server, mode bunqueue.JobMode) {
	db := srv.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("bq_test_jobctl_race")
	t.Cleanup(func() { deleteJobQueueRows(db, queue) })
	race := &cancelRace{runs: map[int64][]int64{}, cancelled: map[int64]int64{}, was: map[int64]bunqueue.JobState{}}
	clients := make([]*bunqueue.Client, 3)
	for i := range clients {
		clients[i] = jobsTestClient(t, srv.Open(t, 0), bunqueue.Config{
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 3, Mode: mode, Lease: 30 * time.Second}},
		})
		require.NoError(t, bunqueue.AddWorker(clients[i], bunqueue.WorkerFunc[ctlArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ctlArgs]) error {
			race.ran(job.ID)
			time.Sleep(5 * time.Millisecond)
			return nil
		})))
	}
	// Paused while the clients start and the jobs are listed, so that
	// the clients start on an idle database (SQLite's write lock), and
	// the jobs wait.
	require.NoError(t, clients[0].PauseQueue(t.Context(), queue))
	t.Cleanup(func() {
		_, _ = db.NewRaw("DELETE FROM bunqueue_queues WHERE name = ?", queue).Exec(context.Background())
	})
	for _, c := range clients {
		start(t, c)
	}
	const n = 600
	jobs := make([]bunqueue.EnqueueParams, n)
	for i := range jobs {
		jobs[i] = bunqueue.EnqueueParams{Args: ctlArgs{N: i}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	}
	_, err := clients[0].EnqueueMany(t.Context(), db, jobs)
	require.NoError(t, err)
	page, err := clients[0].JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, Limit: n})
	require.NoError(t, err)
	require.Len(t, page.Jobs, n)
	var ids []int64
	// Every other job, from the last to run: the cancellers meet the
	// workers, which start from the first, on the jobs that both reach
	// at once.
	for i := 0; i < len(page.Jobs); i += 2 {
		ids = append(ids, page.Jobs[i].ID)
	}

	require.NoError(t, clients[0].ResumeQueue(t.Context(), queue))
	// Cancellers take the next job of ids: one that finds
	// a job running (lock mode) gives up on it after a fraction of a
	// second, the others go on meanwhile.
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
				race.cancel(t, clients[i%len(clients)], ids[i])
			}
		}()
	}
	wg.Wait()
	eventually(t, 60*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "every job ran or was cancelled")
	for _, c := range clients {
		require.NoError(t, c.Stop(t.Context()))
	}

	race.mu.Lock()
	defer race.mu.Unlock()
	pending := 0
	for id, after := range race.cancelled {
		runs := race.runs[id]
		if race.was[id] == bunqueue.JobStateRunning { // lease mode: it runs until its next heartbeat
			require.LessOrEqual(t, len(runs), 1, "job %d", id)
			continue
		}
		pending++
		for _, n := range runs { // a retrying job may have run before (its lease ran out)
			require.Less(t, n, after, "job %d, cancelled (%s) at event %d, ran at events %v", id, race.was[id], after, runs)
		}
	}
	for _, p := range page.Jobs {
		runs := len(race.runs[p.ID])
		require.LessOrEqual(t, runs, 1, "job %d ran twice", p.ID)
		_, cancelled := race.cancelled[p.ID]
		require.True(t, runs == 1 || cancelled, "job %d neither ran nor was cancelled", p.ID)
	}
	require.Equal(t, len(race.cancelled), count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
	t.Logf("%s: %d jobs, %d cancelled (%d pending), %d ran", mode, n, len(race.cancelled), pending, len(race.runs))
}
