package bunqueue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type concurrencyLockArgs struct {
	N int `json:"n"`
}

func (concurrencyLockArgs) Kind() string { return "bq_test_concurrency_lock" }

type concurrencyLeaseArgs struct {
	N int `json:"n"`
}

func (concurrencyLeaseArgs) Kind() string { return "bq_test_concurrency_lease" }

const (
	concurrencyJobs    = 10000
	concurrencyClients = 3
	concurrencyWorkers = 8
)

// Lock mode: 10,000 jobs, three clients (each with its own connection
// pool, as three processes would have) of eight workers. Every worker
// writes an effect row, UNIQUE on the job id, through the job's
// transaction: each job's effect commits exactly once, together with the
// job's completion.
func TestJobsConcurrencyLockModeEffectsExactlyOnce(t *testing.T) {
	db := migrated(t, 0)
	queue := jobQueue(t)
	effects := dbtest.Name("bq_test_jc_effect")
	createTable(t, db, effects, "job_id BIGINT NOT NULL, client INT NOT NULL, UNIQUE KEY (job_id)")
	ids := enqueueConcurrencyJobs(t, db, queue, func(i int) bunqueue.JobArgs { return concurrencyLockArgs{N: i} })

	var calls, workErrs atomic.Int64
	var firstErr atomic.Value
	var inFlight sync.Map
	var overlaps atomic.Int64
	var clients []*bunqueue.Client
	for c := range concurrencyClients {
		client, err := bunqueue.NewClient(dbtest.Open(t, concurrencyWorkers+4), &bunqueue.Config{
			PollInterval: 50 * time.Millisecond, Logger: testLogger(t),
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: concurrencyWorkers, Mode: bunqueue.ModeLock}},
		})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(client, bunqueue.WorkerFunc[concurrencyLockArgs](
			func(ctx context.Context, db bun.IDB, job *bunqueue.Job[concurrencyLockArgs]) error {
				calls.Add(1)
				if _, busy := inFlight.LoadOrStore(job.ID, c); busy {
					overlaps.Add(1)
				}
				defer inFlight.Delete(job.ID)
				if _, ok := db.(bun.Tx); !ok {
					workErrs.Add(1)
					return fmt.Errorf("lock mode must hand the worker its transaction, got %T", db)
				}
				_, err := db.NewRaw("INSERT INTO "+effects+" (job_id, client) VALUES (?, ?)", job.ID, c).Exec(ctx)
				if err != nil {
					workErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				return err
			})))
		clients = append(clients, client)
	}
	began := time.Now()
	for _, c := range clients {
		start(t, c)
	}
	eventually(t, 120*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the queue drains")
	t.Logf("lock mode: %d jobs in %s, %d worker calls", concurrencyJobs, time.Since(began).Round(time.Millisecond), calls.Load())

	require.Zero(t, workErrs.Load(), "a worker failed (a duplicate effect fails with 1062): %v", firstErr.Load())
	require.Zero(t, overlaps.Load(), "two workers held one job at once")
	require.Equal(t, concurrencyJobs, count(t, db, "SELECT COUNT(*) FROM "+effects), "one effect per job")
	require.Equal(t, ids, concurrencyEffectIDs(t, db, effects), "the effects are those of the jobs")
	// A deadlock retried whole may run a worker again, its first writes
	// rolled back: the effects above are the exactly-once proof.
	require.GreaterOrEqual(t, calls.Load(), int64(concurrencyJobs))
	require.Equal(t, concurrencyClients, count(t, db, "SELECT COUNT(DISTINCT client) FROM "+effects), "every client took part")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
}

// Lease mode: the same 10,000 jobs and three clients of eight workers,
// with batches of 1, 4 and 16. Lease mode holds no transaction while a job
// runs, so the worker writes through the *bun.DB: its effect is an INSERT
// IGNORE (an effect may repeat after a crash, by design), and the proof
// that no job ran twice at the same time is an inflight table keyed by the
// job id, into which every worker inserts its job at start and from which
// it deletes it at the end: a duplicate key at start would be two workers
// on one job. With no crash and a lease far longer than a job, each job
// also runs exactly once.
func TestJobsConcurrencyLeaseModeNoJobRunsTwiceAtOnce(t *testing.T) {
	db := migrated(t, 0)
	queue := jobQueue(t)
	effects := dbtest.Name("bq_test_jc_lease_effect")
	inflight := dbtest.Name("bq_test_jc_inflight")
	createTable(t, db, effects, "job_id BIGINT NOT NULL, client INT NOT NULL, UNIQUE KEY (job_id)")
	createTable(t, db, inflight, "job_id BIGINT NOT NULL PRIMARY KEY, client INT NOT NULL")
	ids := enqueueConcurrencyJobs(t, db, queue, func(i int) bunqueue.JobArgs { return concurrencyLeaseArgs{N: i} })

	var calls, twice, workErrs, overlaps atomic.Int64
	var firstErr atomic.Value
	var inFlight sync.Map
	fail := func(err error) error {
		workErrs.Add(1)
		firstErr.CompareAndSwap(nil, err)
		return err
	}
	batches := []int{1, 4, 16}
	var clients []*bunqueue.Client
	for c := range concurrencyClients {
		client, err := bunqueue.NewClient(dbtest.Open(t, concurrencyWorkers+4), &bunqueue.Config{
			PollInterval: 50 * time.Millisecond, Logger: testLogger(t),
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {
				Workers: concurrencyWorkers, Mode: bunqueue.ModeLease, BatchSize: batches[c], Lease: 30 * time.Second,
			}},
		})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(client, bunqueue.WorkerFunc[concurrencyLeaseArgs](
			func(ctx context.Context, db bun.IDB, job *bunqueue.Job[concurrencyLeaseArgs]) error {
				calls.Add(1)
				if _, busy := inFlight.LoadOrStore(job.ID, c); busy {
					overlaps.Add(1)
				}
				defer inFlight.Delete(job.ID)
				if _, ok := db.(*bun.DB); !ok {
					return fail(fmt.Errorf("lease mode must hand the worker the *bun.DB, got %T", db))
				}
				if _, err := db.NewRaw("INSERT INTO "+inflight+" (job_id, client) VALUES (?, ?)", job.ID, c).Exec(ctx); err != nil {
					if dbtest.IsMySQLError(err, 1062) {
						twice.Add(1)
					}
					return fail(err)
				}
				r, err := db.NewRaw("INSERT INTO "+effects+" (job_id, client) VALUES (?, ?)"+dialectOf(db).SkipTakenKeys(), job.ID, c).Exec(ctx)
				if err != nil {
					return fail(err)
				}
				if n, _ := r.RowsAffected(); n == 0 {
					twice.Add(1) // the effect was there: the job ran before
				}
				if _, err := db.NewRaw("DELETE FROM "+inflight+" WHERE job_id = ?", job.ID).Exec(ctx); err != nil {
					return fail(err)
				}
				return nil
			})))
		clients = append(clients, client)
	}
	began := time.Now()
	for _, c := range clients {
		start(t, c)
	}
	eventually(t, 120*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the queue drains")
	t.Logf("lease mode: %d jobs in %s, %d worker calls", concurrencyJobs, time.Since(began).Round(time.Millisecond), calls.Load())

	require.Zero(t, workErrs.Load(), "a worker failed: %v", firstErr.Load())
	require.Zero(t, twice.Load(), "a job ran twice (a duplicate key in the inflight table, or an effect already there)")
	require.Zero(t, overlaps.Load(), "two workers of this process held one job at once")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+inflight), "every run finished")
	require.Equal(t, concurrencyJobs, count(t, db, "SELECT COUNT(*) FROM "+effects), "one effect per job")
	require.Equal(t, ids, concurrencyEffectIDs(t, db, effects), "the effects are those of the jobs")
	require.Equal(t, int64(concurrencyJobs), calls.Load(), "each job ran once")
	require.Equal(t, concurrencyClients, count(t, db, "SELECT COUNT(DISTINCT client) FROM "+effects), "every client took part")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
}

// enqueueConcurrencyJobs enqueues concurrencyJobs jobs with EnqueueMany and
// returns their ids, in order; it deletes what is left of them (and of
// their failures) when the test ends.
func enqueueConcurrencyJobs(t *testing.T, db *bun.DB, queue string, args func(i int) bunqueue.JobArgs) []int64 {
	t.Helper()
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger:    testLogger(t),
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
	jobs := make([]bunqueue.EnqueueParams, concurrencyJobs)
	for i := range jobs {
		jobs[i] = bunqueue.EnqueueParams{Args: args(i), Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	}
	n, err := c.EnqueueMany(t.Context(), db, jobs)
	require.NoError(t, err)
	require.Equal(t, concurrencyJobs, n)
	var ids []int64
	require.NoError(t, db.NewRaw("SELECT id FROM bunqueue_jobs WHERE queue = ? ORDER BY id", queue).Scan(t.Context(), &ids))
	require.Len(t, ids, concurrencyJobs)
	return ids
}

// concurrencyEffectIDs returns the job ids of an effects table, in order.
func concurrencyEffectIDs(t *testing.T, db *bun.DB, table string) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, db.NewRaw("SELECT job_id FROM "+table+" ORDER BY job_id").Scan(t.Context(), &ids))
	return ids
}
