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

const (
	limitClients = 3
	limitWorkers = 4
	limitItems   = 150
	limitGlobal  = 3
	limitWork    = 10 * time.Millisecond
)

type limitItem struct {
	bun.BaseModel `bun:"table:bq_limit_items"`
	heRow
}

// concurrency records handler runs across clients: how many run at once
// (at most ever), and how often each item ran.
type concurrency struct {
	mu      sync.Mutex
	running int
	most    int
	runs    map[int64]int
}

// run marks item id running until the returned function is called.
func (c *concurrency) run(id int64) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[int64]int{}
	}
	c.runs[id]++
	c.running++
	c.most = max(c.most, c.running)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.running--
	}
}

// check requires that each of n items ran once and that no more than
// limit ran at once, and that more than one did where the server lets
// workers run side by side: a limit the test never reached proves
// nothing.
func (c *concurrency) check(t *testing.T, n, limit int, parallel bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d items, at most %d running at once (limit %d)", len(c.runs), c.most, limit)
	require.Len(t, c.runs, n, "items run")
	for id, runs := range c.runs {
		require.Equal(t, 1, runs, "runs of item %d", id)
	}
	require.LessOrEqual(t, c.most, limit, "handlers running at once")
	if parallel {
		require.Equal(t, limit, c.most, "the limit was reached")
	}
}

// Three clients on pools of their own, four workers each, on a queue with
// a GlobalLimit of three: never more than three handlers run at once
// across them, every item runs once, and the limit is reached (SQLite
// runs one writer at a time: one).
func TestGlobalLimitAcrossProcesses(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		clients := pauseClientsOn(srv)
		parallel := srv.Name != "sqlite"
		t.Run("table", func(t *testing.T) {
			db := srv.Open(t, 0)
			require.NoError(t, bunqueue.Migrate(t.Context(), db))
			ids := make([]int64, limitItems)
			for i := range ids {
				ids[i] = int64(i + 1)
			}
			heItems(t, db, "bq_limit_items", ids...)
			queue := dbtest.Name("limit")
			t.Cleanup(func() { clearSlots(db, queue) })
			var cc concurrency
			for range clients {
				q := bunqueue.NewQueue(queue, heWaiting, func(ctx context.Context, tx bun.Tx, it *limitItem) error {
					defer cc.run(it.ID)()
					time.Sleep(limitWork)
					return setStatus(ctx, tx, it, "done")
				}, &bunqueue.QueueConfig[limitItem]{Workers: limitWorkers, BatchSize: 1, PollInterval: 50 * time.Millisecond, GlobalLimit: limitGlobal})
				c := newClient(t, srv.Open(t, 0), q)
				start(t, c)
			}
			eventually(t, 60*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bq_limit_items WHERE status = 'done'") == limitItems
			}, "every item done")
			cc.check(t, limitItems, limitGlobal, parallel)
		})
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run("jobs-"+mode.String(), func(t *testing.T) {
				db := srv.Open(t, 0)
				require.NoError(t, bunqueue.Migrate(t.Context(), db))
				f := &pauseFleet{queue: ownJobQueue(t, db)}
				t.Cleanup(func() { clearSlots(db, f.queue) })
				f.enqueuer(t, db)(1, limitItems)
				var cc concurrency
				for range clients {
					startLimitedJobs(t, srv.Open(t, 0), f.queue, mode, &cc)
				}
				eventually(t, 60*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", f.queue) == 0
				}, "every job done")
				cc.check(t, limitItems, limitGlobal, parallel)
				if mode == bunqueue.ModeLease {
					eventually(t, 5*time.Second, func() bool {
						return count(t, db, "SELECT COUNT(*) FROM bunqueue_slots WHERE queue = ? AND holder IS NOT NULL", f.queue) == 0
					}, "every leased slot freed when its batch ended")
				}
			})
		}
	})
}

// startLimitedJobs starts a client on db that runs the jobs of queue in
// mode, limitWorkers workers under a GlobalLimit of limitGlobal, and
// records them in cc.
func startLimitedJobs(t *testing.T, db *bun.DB, queue string, mode bunqueue.JobMode, cc *concurrency) *bunqueue.Client {
	t.Helper()
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger: testLogger(t), PollInterval: 50 * time.Millisecond,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: limitWorkers, BatchSize: 1, Lease: 2 * time.Second, GlobalLimit: limitGlobal}},
	})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[heJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[heJobArgs]) error {
		defer cc.run(int64(job.Args.N))()
		time.Sleep(limitWork)
		return nil
	})))
	start(t, c)
	return c
}

// startLimitedJobsOf starts a client on db that runs the relKillArgs jobs
// of queue in mode ("lock" or "lease"), four workers under a GlobalLimit
// of limit, and records them in cc.
func startLimitedJobsOf(t *testing.T, db *bun.DB, queue, mode string, limit int, cc *concurrency) *bunqueue.Client {
	t.Helper()
	m := bunqueue.ModeLock
	if mode == "lease" {
		m = bunqueue.ModeLease
	}
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger: testLogger(t), PollInterval: 50 * time.Millisecond, Backoff: fastBackoff,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: m, Workers: 4, BatchSize: 1, Lease: 2 * time.Second, GlobalLimit: limit}},
	})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[relKillArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[relKillArgs]) error {
		defer cc.run(job.Args.N)()
		time.Sleep(limitWork)
		return nil
	})))
	start(t, c)
	return c
}

// clearSlots deletes the slots of queue.
func clearSlots(db *bun.DB, queue string) {
	_, _ = db.NewRaw("DELETE FROM bunqueue_slots WHERE queue = ?", queue).Exec(context.Background())
}

// A GlobalLimit needs the slots table: Start says so, naming the queue;
// a negative limit is refused at NewClient and Add, naming the field.
func TestGlobalLimitErrors(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	_, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"q": {GlobalLimit: -1}}})
	require.ErrorContains(t, err, `Config.JobQueues["q"].GlobalLimit must not be negative, got -1`)
	c, err := bunqueue.NewClient(db, nil)
	require.NoError(t, err)
	q := bunqueue.NewQueue("neg", heWaiting, func(context.Context, bun.Tx, *limitItem) error { return nil },
		&bunqueue.QueueConfig[limitItem]{GlobalLimit: -2})
	require.ErrorContains(t, c.Add(q), `queue "neg": QueueConfig.GlobalLimit must not be negative, got -2`)
}

// A worker process that holds every slot of a GlobalLimit of two (its
// jobs block) keeps another client of the queue from running any job;
// once it is killed with SIGKILL its slots are free: at once in lock mode
// (the server rolls its transactions back), once their lease runs out in
// lease mode. Then the other client runs every job, never more than two
// at once.
func TestGlobalLimitFreedWhenAProcessDies(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, mode := range []string{"lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const jobs, limit = 20, 2
			queue := ownJobQueue(t, db)
			t.Cleanup(func() { clearSlots(db, queue) })
			producer := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
			params := make([]bunqueue.EnqueueParams, jobs)
			for i := range params {
				params[i] = bunqueue.EnqueueParams{Args: relKillArgs{N: int64(i + 1)}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
			}
			_, err := producer.EnqueueMany(t.Context(), db, params)
			require.NoError(t, err)

			effects := relEffectsTable(t, db, "bq_limit_kill_eff")
			fleet := newRelFleet(t, relWorkerConfig{Mode: mode, Queue: queue, Effects: effects, Workers: 4, Lease: 2 * time.Second, Limit: limit, Block: true}, []int{1})
			eventually(t, 30*time.Second, func() bool {
				_, unfinished, _, err := relReadEvents(fleet.slots[0].events, "", 0)
				return err == nil && unfinished == limit
			}, "the worker process runs two jobs, holding both slots")

			var cc concurrency
			other := startLimitedJobsOf(t, dbtest.Open(t, 0), queue, mode, limit, &cc)
			time.Sleep(time.Second)
			cc.mu.Lock()
			require.Empty(t, cc.runs, "another client ran jobs while the process held every slot")
			cc.mu.Unlock()

			p := fleet.slots[0]
			require.NoError(t, p.cmd.Process.Kill())
			<-p.exit
			killed := time.Now()
			eventually(t, 30*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
			}, "the other client runs every job once the process is gone")
			t.Logf("%s mode: every job ran %s after the kill", mode, time.Since(killed).Round(time.Millisecond))
			require.NoError(t, other.Stop(t.Context()))
			cc.check(t, jobs, limit, true)
		})
	}
}
