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

type waitArgs struct {
	N int `json:"n"`
}

func (waitArgs) Kind() string { return "bq_test_wait" }

const (
	waitClients = 3
	waitJobs    = 30                     // per queue
	waitHeld    = 300 * time.Millisecond // how long the jobs wait before any worker runs
	waitPast    = 10 * time.Minute       // how long before its enqueue a job is scheduled for
)

// History's waits before start, on every server, in lock and lease mode,
// with three clients on their own pools: jobs enqueued while no worker
// ran waited at least as long as that; a job scheduled ten minutes in the
// past waited at least ten minutes; jobs enqueued while the workers run
// wait less than a generous bound; each client counts the starts of its
// own workers, and together they count each job once. A queue over a
// table reports no start.
func TestHistoryWaitBeforeStart(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		w := &waitTest{lock: jobQueue(t), lease: jobQueue(t), fresh: jobQueue(t), byJob: map[int64]int{}}
		t.Cleanup(func() {
			_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue IN (?, ?, ?)", w.lock, w.lease, w.fresh)
		})
		srvTable(t, db, "bq_test_wait_rows", "id BIGINT PRIMARY KEY, done BOOLEAN NOT NULL DEFAULT FALSE")
		dbtest.Exec(t, db, "INSERT INTO bq_test_wait_rows (id) VALUES (1), (2), (3)")
		for i := range waitClients {
			w.byClient[i] = map[string]int64{}
			w.clients = append(w.clients, w.client(t, srv.Open(t, 16), i))
		}
		jobs := w.enqueue(t, db, w.lock, waitJobs) + w.enqueue(t, db, w.lease, waitJobs)
		_, err := w.clients[0].Enqueue(t.Context(), db, waitArgs{}, &bunqueue.EnqueueOpts{Queue: w.lease, RunAt: time.Now().Add(-waitPast)})
		require.NoError(t, err)
		time.Sleep(waitHeld)
		for _, c := range w.clients {
			start(t, c)
		}
		eventually(t, 30*time.Second, func() bool { return w.jobs() == jobs+1 }, "every job ran")
		jobs += w.enqueue(t, db, w.fresh, waitJobs)
		eventually(t, 30*time.Second, func() bool { return w.jobs() == jobs+1 }, "the fresh jobs ran")

		w.check(t, w.lock, waitJobs, waitHeld, time.Hour)
		w.check(t, w.lease, waitJobs+1, waitHeld, time.Hour)
		w.check(t, w.fresh, waitJobs, 0, 10*time.Second)
		require.GreaterOrEqual(t, w.longest(w.lease), waitPast, "the job due ten minutes before it was enqueued")
		eventually(t, 30*time.Second, func() bool { return sum(w.clients[0].History("wait_rows").Processed) == 3 }, "the rows processed")
		rows := w.clients[0].History("wait_rows")
		require.Equal(t, make([]int64, bunqueue.HistoryMinutes), rows.Started, "a table queue reports no start")
		require.Equal(t, make([]time.Duration, bunqueue.HistoryMinutes), rows.WaitMax)
	})
}

// waitTest is TestHistoryWaitBeforeStart's clients and queues, and the
// handler runs of each job, and of each client by queue.
type waitTest struct {
	clients            []*bunqueue.Client
	lock, lease, fresh string

	mu       sync.Mutex
	byJob    map[int64]int
	byClient [waitClients]map[string]int64
}

func (w *waitTest) ran(client int, job *bunqueue.Job[waitArgs]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byJob[job.ID]++
	w.byClient[client][job.Queue]++
}

func (w *waitTest) jobs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byJob)
}

// check checks the History of queue on every client: their starts are
// those of their own workers, want in all, each job ran once, and the
// waits of each minute with starts are from least to most.
func (w *waitTest) check(t *testing.T, queue string, want int64, least, most time.Duration) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var started int64
	for i, c := range w.clients {
		n := checkWaits(t, c.History(queue), least, most)
		require.Equal(t, w.byClient[i][queue], n, "client %d counts the starts of its own workers in %s", i, queue)
		started += n
	}
	require.Equal(t, want, started, "every job of %s started once", queue)
	for id, n := range w.byJob {
		require.Equal(t, 1, n, "job %d ran once", id)
	}
}

type waitRow struct {
	bun.BaseModel `bun:"table:bq_test_wait_rows"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// client returns client i, on db, with workers in the jobs queues that
// count their runs; client 0 has a table queue too.
func (w *waitTest) client(t *testing.T, db *bun.DB, i int) *bunqueue.Client {
	t.Helper()
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
		JobQueues: map[string]bunqueue.JobQueueConfig{
			w.lock:  {Workers: 2},
			w.lease: {Workers: 2, Mode: bunqueue.ModeLease, Lease: 10 * time.Second},
			w.fresh: {Workers: 2},
		}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[waitArgs](func(_ context.Context, _ bun.IDB, job *bunqueue.Job[waitArgs]) error {
		w.ran(i, job)
		return nil
	})))
	if i == 0 {
		require.NoError(t, c.Add(bunqueue.NewQueue("wait_rows",
			func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE") },
			func(ctx context.Context, tx bun.Tx, r *waitRow) error {
				_, err := tx.NewUpdate().Model(r).Set("done = TRUE").WherePK().Exec(ctx)
				return err
			}, nil)))
	}
	return c
}

// enqueue enqueues n jobs into queue and returns n.
func (w *waitTest) enqueue(t *testing.T, db *bun.DB, queue string, n int) int {
	t.Helper()
	for i := range n {
		_, err := w.clients[i%waitClients].Enqueue(t.Context(), db, waitArgs{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	return n
}

// longest returns the longest wait before start of queue, over the hour
// and the clients.
func (w *waitTest) longest(queue string) time.Duration {
	var most time.Duration
	for _, c := range w.clients {
		for _, d := range c.History(queue).WaitMax {
			most = max(most, d)
		}
	}
	return most
}

// checkWaits checks the waits of h's minutes against its starts: none in
// a minute without, else from least to most, in order; it returns the
// starts.
func checkWaits(t *testing.T, h bunqueue.QueueHistory, least, most time.Duration) (started int64) {
	t.Helper()
	for m, n := range h.Started {
		p50, p95, top := h.WaitP50[m], h.WaitP95[m], h.WaitMax[m]
		if n == 0 {
			require.Zero(t, p50+p95+top, "no wait in minute %d: no start", m)
			continue
		}
		started += n
		require.GreaterOrEqual(t, p50, least, "minute %d of %s", m, h.Queue)
		require.LessOrEqual(t, p50, p95, "minute %d of %s", m, h.Queue)
		require.LessOrEqual(t, p95, top, "minute %d of %s", m, h.Queue)
		require.Less(t, top, most, "minute %d of %s", m, h.Queue)
	}
	return started
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// A job that waited for a paused queue, and for a GlobalLimit's one
// slot, counts that wait: with the workers running, jobs enqueued into
// a paused queue, resumed after waitHeld, waited at least that long.
func TestHistoryWaitCountsAPause(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	t.Cleanup(func() { _, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue) })
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 3, GlobalLimit: 1}}})
	require.NoError(t, err)
	var mu sync.Mutex
	ran := 0
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[waitArgs](func(context.Context, bun.IDB, *bunqueue.Job[waitArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		ran++
		return nil
	})))
	require.NoError(t, c.PauseQueue(t.Context(), queue))
	t.Cleanup(func() { _ = c.ResumeQueue(context.Background(), queue) })
	start(t, c)
	for i := range waitJobs {
		_, err := c.Enqueue(t.Context(), db, waitArgs{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	time.Sleep(waitHeld)
	mu.Lock()
	require.Zero(t, ran, "the queue is paused")
	mu.Unlock()
	require.NoError(t, c.ResumeQueue(t.Context(), queue))
	eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return ran == waitJobs }, "the jobs ran once resumed")
	require.Equal(t, int64(waitJobs), checkWaits(t, c.History(queue), waitHeld, time.Hour))
}
