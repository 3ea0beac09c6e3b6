package bunqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

const (
	pauseClients = 3
	pauseWorkers = 3
	pauseItems   = 300
	pausePoll    = 100 * time.Millisecond
	pauseWork    = 20 * time.Millisecond
	// pauseSeen bounds when the last start may come after PauseQueue
	// returned: a poll interval, on a loaded machine.
	pauseSeen = pausePoll + 400*time.Millisecond
)

type pauseItem struct {
	bun.BaseModel `bun:"table:bq_pause_items"`
	heRow
}

// pauseRuns records each handler run: the item and when it began.
type pauseRuns struct {
	mu     sync.Mutex
	starts map[int64][]time.Time
}

func (r *pauseRuns) begin(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starts == nil {
		r.starts = map[int64][]time.Time{}
	}
	r.starts[id] = append(r.starts[id], time.Now())
}

// after returns how many runs began after t, and how many in all.
func (r *pauseRuns) after(t time.Time) (late, all int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ss := range r.starts {
		for _, s := range ss {
			all++
			if s.After(t) {
				late++
			}
		}
	}
	return late, all
}

// once requires each of n items run exactly once.
func (r *pauseRuns) once(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.starts, n, "items run")
	for id, ss := range r.starts {
		require.Len(t, ss, 1, "runs of item %d", id)
	}
}

// pauseFleet is pauseClients clients on pools of their own, as app
// servers, each running the queue under test.
type pauseFleet struct {
	clients []*bunqueue.Client
	queue   string
	runs    *pauseRuns
	sqlite  bool // one writer at a time: PauseQueue may wait out the run
}

// A queue paused by one process stops in every process within a poll
// interval: the items in flight finish, none starts later, Stats says so
// everywhere, and after ResumeQueue the rest run, each once. Batches of
// one: the items of a batch claimed before the pause are in flight, and
// run to the batch's end.
func TestPauseQueueStopsEveryProcess(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		t.Run("table", func(t *testing.T) {
			db := srv.Open(t, 0)
			require.NoError(t, bunqueue.Migrate(t.Context(), db))
			ids := make([]int64, pauseItems)
			for i := range ids {
				ids[i] = int64(i + 1)
			}
			heItems(t, db, "bq_pause_items", ids...)
			f := &pauseFleet{queue: dbtest.Name("pause"), runs: &pauseRuns{}, sqlite: srv.Name == "sqlite"}
			t.Cleanup(func() { clearPause(db, f.queue) })
			for range pauseClientsOn(srv) {
				q := bunqueue.NewQueue(f.queue, heWaiting, func(ctx context.Context, tx bun.Tx, it *pauseItem) error {
					f.runs.begin(it.ID)
					time.Sleep(pauseWork)
					return setStatus(ctx, tx, it, "done")
				}, &bunqueue.QueueConfig[pauseItem]{Workers: pauseWorkers, BatchSize: 1, PollInterval: pausePoll})
				f.start(t, srv.Open(t, 0), &bunqueue.Config{Logger: testLogger(t)}, q)
			}
			f.pauseAndResume(t, db, nil)
		})
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run("jobs-"+mode.String(), func(t *testing.T) {
				db := srv.Open(t, 0)
				require.NoError(t, bunqueue.Migrate(t.Context(), db))
				f := &pauseFleet{queue: ownJobQueue(t, db), runs: &pauseRuns{}, sqlite: srv.Name == "sqlite"}
				t.Cleanup(func() { clearPause(db, f.queue) })
				enq := f.enqueuer(t, db)
				enq(1, pauseItems)
				for range pauseClientsOn(srv) {
					f.start(t, srv.Open(t, 0), &bunqueue.Config{
						Logger: testLogger(t), PollInterval: pausePoll,
						JobQueues: map[string]bunqueue.JobQueueConfig{f.queue: {Mode: mode, Workers: pauseWorkers, BatchSize: 1, Lease: 10 * time.Second}},
					})
				}
				f.pauseAndResume(t, db, enq)
			})
		}
	})
}

// pauseClientsOn is the number of app servers on srv: SQLite takes one
// process's writes (see docs/servers.md).
func pauseClientsOn(srv dbtest.Server) int {
	if srv.Name == "sqlite" {
		return 1
	}
	return pauseClients
}

// start starts a client on db with cfg and queues, and the workers of
// the pause jobs.
func (f *pauseFleet) start(t *testing.T, db *bun.DB, cfg *bunqueue.Config, queues ...bunqueue.AnyQueue) {
	t.Helper()
	c, err := bunqueue.NewClient(db, cfg)
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, c.Add(q))
	}
	if len(cfg.JobQueues) > 0 {
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[heJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[heJobArgs]) error {
			f.runs.begin(int64(job.Args.N))
			time.Sleep(pauseWork)
			return nil
		})))
	}
	start(t, c)
	f.clients = append(f.clients, c)
}

// enqueuer returns a function that enqueues the jobs numbered from to to.
func (f *pauseFleet) enqueuer(t *testing.T, db *bun.DB) func(from, to int) {
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{f.queue: {}}})
	require.NoError(t, err)
	return func(from, to int) {
		t.Helper()
		var jobs []bunqueue.EnqueueParams
		for n := from; n <= to; n++ {
			jobs = append(jobs, bunqueue.EnqueueParams{Args: heJobArgs{N: n}, Opts: &bunqueue.EnqueueOpts{Queue: f.queue}})
		}
		_, err := c.EnqueueMany(t.Context(), db, jobs)
		require.NoError(t, err)
	}
}

// pauseAndResume pauses the queue through a client of its own (as the
// CLI or the dashboard would) once some items ran, checks that the
// queue stops, enqueues more with enq if given, resumes, and checks
// every item ran once.
func (f *pauseFleet) pauseAndResume(t *testing.T, db *bun.DB, enq func(from, to int)) {
	t.Helper()
	ctl, err := bunqueue.NewClient(db, nil)
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool { _, all := f.runs.after(time.Time{}); return all >= pauseItems/10 },
		"some items run before the pause")
	require.NoError(t, ctl.PauseQueue(t.Context(), f.queue))
	paused := time.Now()
	require.NoError(t, ctl.PauseQueue(t.Context(), f.queue), "a second pause")
	time.Sleep(pauseSeen + time.Second)
	late, before := f.runs.after(paused.Add(pauseSeen))
	require.Zero(t, late, "runs that began more than %s after PauseQueue returned", pauseSeen)
	if f.sqlite && before == pauseItems {
		// SQLite's busy handler is not fair: a writer may wait while the
		// workers' transactions take the lock one after another.
		t.Skipf("PauseQueue waited for SQLite's write lock until all %d items ran: nothing left to pause", pauseItems)
	}
	require.Less(t, before, pauseItems, "the pause came after every item ran: the test proves nothing")
	for i, c := range f.clients {
		stats, err := c.Stats(t.Context())
		require.NoError(t, err)
		require.True(t, stats[0].Paused, "client %d's Stats", i)
	}
	total := pauseItems
	if enq != nil {
		enq(pauseItems+1, pauseItems+20) // wait while paused
		total += 20
		time.Sleep(2 * pausePoll)
		late, _ = f.runs.after(paused.Add(pauseSeen))
		require.Zero(t, late, "jobs enqueued to the paused queue ran")
	}
	require.NoError(t, ctl.ResumeQueue(t.Context(), f.queue))
	eventually(t, 60*time.Second, func() bool { _, all := f.runs.after(time.Time{}); return all >= total }, "every item run after the resume")
	for _, c := range f.clients {
		stopNow(t, c)
	}
	f.runs.once(t, total)
	t.Logf("%d items before the pause took effect, %d in all, each once", before, total)
}

// clearPause deletes the queue's row of bunqueue_queues.
func clearPause(db *bun.DB, queue string) {
	_, _ = db.NewRaw("DELETE FROM bunqueue_queues WHERE name = ?", queue).Exec(context.Background())
}

// A queue paused before a client starts starts paused; PauseQueue refuses
// a name that the queues table cannot hold, naming it.
func TestPauseQueueBeforeStartAndBadNames(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		queue := ownJobQueue(t, db)
		t.Cleanup(func() { clearPause(db, queue) })
		ctl, err := bunqueue.NewClient(db, nil)
		require.NoError(t, err)
		for _, bad := range []string{"", string(make([]byte, 129)), "a\x00b", "\xff"} {
			err := ctl.PauseQueue(t.Context(), bad)
			require.ErrorContains(t, err, "bunqueue: PauseQueue: the queue name", "name %q", bad)
		}
		require.ErrorContains(t, ctl.ResumeQueue(t.Context(), ""), "bunqueue: ResumeQueue: the queue name")

		require.NoError(t, ctl.PauseQueue(t.Context(), queue))
		runs := &pauseRuns{}
		f := &pauseFleet{queue: queue, runs: runs}
		f.enqueuer(t, db)(1, 5)
		f.start(t, srv.Open(t, 0), &bunqueue.Config{Logger: testLogger(t), PollInterval: pausePoll,
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}}})
		time.Sleep(5 * pausePoll)
		_, all := runs.after(time.Time{})
		require.Zero(t, all, "jobs of a queue paused before Start ran")
		require.NoError(t, ctl.ResumeQueue(t.Context(), queue))
		eventually(t, 30*time.Second, func() bool { _, all := runs.after(time.Time{}); return all == 5 }, "the jobs run after the resume")
		stopNow(t, f.clients[0])
		runs.once(t, 5)
		require.Equal(t, 1, count(t, db, fmt.Sprintf("SELECT COUNT(*) FROM bunqueue_queues WHERE name = '%s' AND paused_at IS NULL", queue)),
			"the resumed queue's row")
	})
}

// stopNow stops c, waiting for its handlers (start stops it again, which
// waits for the same drain).
func stopNow(t *testing.T, c *bunqueue.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}
