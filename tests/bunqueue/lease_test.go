package bunqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The lease-mode tests. The 10,000-job check that no job runs twice at the
// same time (an inflight table keyed by the job id) is
// TestJobsConcurrencyLeaseModeNoJobRunsTwiceAtOnce, in
// jobs_concurrency_test.go.

const leaseTestLease = 2 * time.Second

// Environment of the worker process that the kill tests start: when
// leaseWorkerEnv is set, TestMain runs runLeaseWorkerProcess instead of
// the tests.
const (
	leaseWorkerEnv = "BUNQUEUE_TEST_LEASE_WORKER" // the jobs queue to work
	leaseTableEnv  = "BUNQUEUE_TEST_LEASE_TABLE"  // where workers record their starts
)

type leaseCrashArgs struct{}

func (leaseCrashArgs) Kind() string { return "bq_test_lease_crash" }

type leaseLastArgs struct{}

func (leaseLastArgs) Kind() string { return "bq_test_lease_last_attempt" }

type leaseStaleArgs struct{}

func (leaseStaleArgs) Kind() string { return "bq_test_lease_stale" }

type leaseLongArgs struct{}

func (leaseLongArgs) Kind() string { return "bq_test_lease_long" }

type leaseStopArgs struct {
	N int `json:"n"`
}

func (leaseStopArgs) Kind() string { return "bq_test_lease_stop" }

type leaseSnoozeArgs struct{}

func (leaseSnoozeArgs) Kind() string { return "bq_test_lease_snooze" }

type leaseFailArgs struct{}

func (leaseFailArgs) Kind() string { return "bq_test_lease_fail" }

// runLeaseWorkerProcess is the worker process of the kill tests: a
// lease-mode client (Lease 2 s) on the queue named by leaseWorkerEnv, whose
// workers record their start in the table named by leaseTableEnv and then
// hang until the process is killed. It returns the exit code.
func runLeaseWorkerProcess() int {
	queue, table := os.Getenv(leaseWorkerEnv), os.Getenv(leaseTableEnv)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	db, err := dbtest.OpenDB()
	if err != nil {
		log.Error("open", "error", err)
		return 2
	}
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond, Logger: log,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: bunqueue.ModeLease, Lease: leaseTestLease}},
	})
	if err != nil {
		log.Error("client", "error", err)
		return 2
	}
	hang := func(ctx context.Context, db bun.IDB, id int64, attempt int) error {
		if err := recordLeaseStart(ctx, db, table, id, attempt); err != nil {
			log.Error("record the start", "error", err)
			return err
		}
		log.Info("job started; hanging until killed", "id", id, "attempt", attempt)
		select {} // a hung worker: only SIGKILL ends it
	}
	err = errors.Join(
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseCrashArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseCrashArgs]) error {
			return hang(ctx, db, job.ID, job.Attempt)
		})),
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseLastArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseLastArgs]) error {
			return hang(ctx, db, job.ID, job.Attempt)
		})),
	)
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		log.Error("start", "error", err)
		return 2
	}
	// The test kills this process long before; never outlive a test that
	// died without killing it by much.
	time.Sleep(2 * time.Minute)
	log.Error("not killed within 2 minutes")
	return 3
}

// recordLeaseStart records that a worker started attempt of job id: when,
// by the database clock, and the job's lease end (its run_at) at that time.
func recordLeaseStart(ctx context.Context, db bun.IDB, table string, id int64, attempt int) error {
	_, err := db.NewRaw("INSERT INTO "+table+" (job_id, attempt, pid, started_at, lease_until) "+
		"SELECT id, ?, ?, "+nowSQL(db)+", run_at FROM bunqueue_jobs WHERE id = ?",
		attempt, os.Getpid(), id).Exec(ctx)
	return err
}

type leaseStart struct {
	JobID      int64
	Attempt    int
	Pid        int
	StartedAt  time.Time
	LeaseUntil time.Time
}

func leaseStarts(t *testing.T, db *bun.DB, table string, id int64) []leaseStart {
	t.Helper()
	var out []leaseStart
	require.NoError(t, db.NewRaw("SELECT job_id, attempt, pid, started_at, lease_until FROM "+table+" WHERE job_id = ? ORDER BY attempt", id).
		Scan(t.Context(), &out))
	return out
}

// leaseWorkerProcess is a running worker process.
type leaseWorkerProcess struct {
	cmd  *exec.Cmd
	out  *leaseLockedBuffer
	once sync.Once
	err  error
}

// startLeaseWorkerProcess re-executes the test binary as a worker process
// of queue that records its starts in table. It is killed when the test
// ends, and its output is logged if the test failed.
func startLeaseWorkerProcess(t *testing.T, queue, table string) *leaseWorkerProcess {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	p := &leaseWorkerProcess{out: &leaseLockedBuffer{}}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), leaseWorkerEnv+"="+queue, leaseTableEnv+"="+table)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.kill()
		if t.Failed() {
			t.Logf("worker process output:\n%s", p.out.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to end.
func (p *leaseWorkerProcess) kill() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill() // SIGKILL on Unix
		p.err = p.cmd.Wait()
	})
	return p.err
}

// startedIn waits until the worker process started attempt 1 of job id.
func (p *leaseWorkerProcess) startedIn(t *testing.T, db *bun.DB, table string, id int64) leaseStart {
	t.Helper()
	eventually(t, 60*time.Second, func() bool {
		if p.cmd.ProcessState != nil {
			t.Fatalf("the worker process ended: %s\n%s", p.cmd.ProcessState, p.out.String())
		}
		return count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE job_id = ?", id) > 0
	}, "the worker process starts the job")
	starts := leaseStarts(t, db, table, id)
	require.Len(t, starts, 1)
	require.Equal(t, 1, starts[0].Attempt)
	require.Equal(t, p.cmd.Process.Pid, starts[0].Pid)
	return starts[0]
}

// killAndReadLease kills the worker process with SIGKILL and returns the
// job's lease end as the dead process left it.
func (p *leaseWorkerProcess) killAndReadLease(t *testing.T, db *bun.DB, id int64) time.Time {
	t.Helper()
	err := p.kill()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the worker process was killed")
	require.Equal(t, -1, ee.ExitCode(), "the worker process was killed by a signal: %s", ee)
	// A heartbeat sent just before the kill may still land; let it.
	time.Sleep(200 * time.Millisecond)
	var job struct {
		RunAt      time.Time
		Attempts   int
		LeaseToken *string
	}
	require.NoError(t, db.NewRaw("SELECT run_at, attempts, lease_token FROM bunqueue_jobs WHERE id = ?", id).Scan(t.Context(), &job))
	require.Equal(t, 1, job.Attempts)
	require.NotNil(t, job.LeaseToken, "the job is still leased by the dead process")
	return job.RunAt
}

func leaseStartsTable(t *testing.T, db *bun.DB) string {
	table := dbtest.Name("bq_test_lease_starts")
	createTable(t, db, table, "job_id BIGINT NOT NULL, attempt INT NOT NULL, pid INT NOT NULL, "+
		"started_at DATETIME(6) NOT NULL, lease_until DATETIME(6) NOT NULL, PRIMARY KEY (job_id, attempt)")
	return table
}

// leaseClient returns a lease-mode client (Lease 2 s unless set) of one
// queue over db.
func leaseClient(t *testing.T, db *bun.DB, queue string, qc bunqueue.JobQueueConfig, cfg *bunqueue.Config) *bunqueue.Client {
	t.Helper()
	qc.Mode = bunqueue.ModeLease
	if qc.Lease == 0 {
		qc.Lease = leaseTestLease
	}
	var c bunqueue.Config
	if cfg != nil {
		c = *cfg
	}
	c.PollInterval = 50 * time.Millisecond
	if c.Logger == nil {
		c.Logger = testLogger(t)
	}
	c.JobQueues = map[string]bunqueue.JobQueueConfig{queue: qc}
	client, err := bunqueue.NewClient(db, &c)
	require.NoError(t, err)
	return client
}

// leaseCleanupQueue deletes the queue's jobs and failed jobs when the test ends.
func leaseCleanupQueue(t *testing.T, db *bun.DB, queue string) {
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
}

func leaseEnqueue(t *testing.T, c *bunqueue.Client, db *bun.DB, args bunqueue.JobArgs, opts *bunqueue.EnqueueOpts) int64 {
	t.Helper()
	res, err := c.Enqueue(t.Context(), db, args, opts)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	return res.ID
}

// A worker process is killed with SIGKILL while it runs a job. Another
// client takes the job up again only once the lease, as the dead worker
// last extended it, has expired by the database clock; it is the job's
// second attempt, and it completes.
func TestLeaseWorkerKilledMidJobIsRunAgainAfterTheLease(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)
	table := leaseStartsTable(t, db)

	var calls atomic.Int64
	c := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: 2}, nil)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseCrashArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseCrashArgs]) error {
		calls.Add(1)
		return recordLeaseStart(ctx, db, table, job.ID, job.Attempt)
	})))
	id := leaseEnqueue(t, c, db, leaseCrashArgs{}, &bunqueue.EnqueueOpts{Queue: queue})

	p := startLeaseWorkerProcess(t, queue, table)
	first := p.startedIn(t, db, table, id)
	// Let the worker process's heartbeat extend the lease at least once
	// after the job started, so that the lease ends more than a lease after
	// the start.
	eventually(t, 10*time.Second, func() bool {
		var runAt time.Time
		require.NoError(t, db.NewRaw("SELECT run_at FROM bunqueue_jobs WHERE id = ?", id).Scan(t.Context(), &runAt))
		return runAt.After(first.LeaseUntil) && runAt.After(first.StartedAt.Add(leaseTestLease))
	}, "the worker process's heartbeat extends the lease")
	leaseEnd := p.killAndReadLease(t, db, id)

	start(t, c)
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", id) == 0
	}, "the job completes in the second client")

	starts := leaseStarts(t, db, table, id)
	require.Len(t, starts, 2)
	second := starts[1]
	require.Equal(t, 2, second.Attempt, "the second run is the job's second attempt")
	require.Equal(t, os.Getpid(), second.Pid)
	require.Equal(t, int64(1), calls.Load())
	require.False(t, second.StartedAt.Before(leaseEnd), "the job ran again at %s, before its lease ended at %s", second.StartedAt, leaseEnd)
	require.GreaterOrEqual(t, second.StartedAt.Sub(first.StartedAt), leaseTestLease,
		"the second start (%s) is at least a lease after the first (%s), by the database clock", second.StartedAt, first.StartedAt)
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", id))
}

// A job with one attempt whose worker process is killed with SIGKILL: when
// its lease expires, the next claim moves it to the failed jobs with a
// lease-expired error instead of running it a second time.
func TestLeaseExpiredOnTheLastAttemptFailsTheJob(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)
	table := leaseStartsTable(t, db)

	var calls atomic.Int64
	c := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: 2}, nil)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseLastArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseLastArgs]) error {
		calls.Add(1)
		return nil
	})))
	id := leaseEnqueue(t, c, db, leaseLastArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1})

	p := startLeaseWorkerProcess(t, queue, table)
	p.startedIn(t, db, table, id)
	leaseEnd := p.killAndReadLease(t, db, id)

	start(t, c)
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", id) == 1
	}, "the job lands in the failed jobs")
	fs, err := c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{Queue: queue})
	require.NoError(t, err)
	require.Len(t, fs, 1)
	f := fs[0]
	require.Equal(t, id, f.JobID)
	require.Equal(t, 1, f.Attempts)
	require.Equal(t, 1, f.MaxAttempts)
	require.Contains(t, f.Error, "lease")
	require.Contains(t, f.Error, "expired")
	require.False(t, f.FailedAt.Before(leaseEnd), "failed at %s, before the lease ended at %s", f.FailedAt, leaseEnd)
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", id))
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, calls.Load(), "the job did not run a second time")
	require.Len(t, leaseStarts(t, db, table, id), 1)
}

// A worker (A) cannot extend its lease, because its handler holds every
// connection of A's pool, and ignores its context. A's lease keeper
// cancels the handler's context while the lease is still A's; the lease
// then expires and a second client (B) takes the job. When A's handler
// finally returns nil, its completion affects no row: the job stays,
// leased by B, until B completes it.
func TestLeaseStaleCompletionAffectsNoRow(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)

	type seen struct {
		token    string
		leaseEnd time.Time
		now      time.Time
		err      error
	}
	aStarted, aCancelled := make(chan seen, 1), make(chan seen, 1)
	bHolds, bRelease := make(chan struct{}), make(chan struct{})
	abort := make(chan struct{}) // closed when the test ends: handlers stop waiting
	var bSeen seen
	var aCalls, bCalls atomic.Int64

	aLog, aLogged := leaseCaptureLogger(t)
	a := leaseClient(t, dbtest.Open(t, 3), queue, bunqueue.JobQueueConfig{Workers: 1}, &bunqueue.Config{Logger: aLog})
	require.NoError(t, bunqueue.AddWorker(a, bunqueue.WorkerFunc[leaseStaleArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseStaleArgs]) error {
		if aCalls.Add(1) > 1 {
			return errors.New("A ran the job twice")
		}
		bg := context.Background()
		// Take every connection of A's pool: the lease keeper's heartbeats
		// cannot get one.
		var conns []bun.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for range 3 {
			conn, err := db.(*bun.DB).Conn(bg)
			if err != nil {
				aStarted <- seen{err: err}
				return err
			}
			conns = append(conns, conn)
		}
		var s seen
		s.err = conns[0].QueryRowContext(bg, "SELECT lease_token, run_at, "+nowSQL(db)+" FROM bunqueue_jobs WHERE id = ?", job.ID).
			Scan(&s.token, &s.leaseEnd, &s.now)
		aStarted <- s
		select {
		case <-ctx.Done():
		case <-abort:
		case <-time.After(15 * time.Second):
		}
		var c seen
		c.err = conns[0].QueryRowContext(bg, "SELECT lease_token, run_at, "+nowSQL(db)+" FROM bunqueue_jobs WHERE id = ?", job.ID).
			Scan(&c.token, &c.leaseEnd, &c.now)
		if ctx.Err() == nil {
			c.err = errors.Join(c.err, errors.New("A's context was never cancelled"))
		}
		aCancelled <- c
		// Ignore the cancel, as a stalled worker would, until B holds the job.
		select {
		case <-bHolds:
		case <-abort:
		case <-time.After(20 * time.Second):
		}
		return nil
	})))

	b := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: 1}, nil)
	require.NoError(t, bunqueue.AddWorker(b, bunqueue.WorkerFunc[leaseStaleArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseStaleArgs]) error {
		if bCalls.Add(1) > 1 {
			return errors.New("B ran the job twice")
		}
		if job.Attempt != 2 {
			bSeen.err = fmt.Errorf("B ran attempt %d, want 2", job.Attempt)
		} else {
			bSeen.err = db.NewRaw("SELECT lease_token, run_at, "+nowSQL(db)+" FROM bunqueue_jobs WHERE id = ?", job.ID).
				Scan(ctx, &bSeen.token, &bSeen.leaseEnd, &bSeen.now)
		}
		close(bHolds)
		select {
		case <-bRelease:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})))

	id := leaseEnqueue(t, a, db, leaseStaleArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
	start(t, a)
	var s seen
	select {
	case s = <-aStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("A did not start the job")
	}
	require.NoError(t, s.err)
	// Only now: B must not take the job first.
	start(t, b)
	// Registered last, so it runs first: the handlers stop waiting before
	// A and B are stopped.
	t.Cleanup(func() { close(abort) })

	var c seen
	select {
	case c = <-aCancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("A's handler did not get past its wait")
	}
	require.NoError(t, c.err)
	require.Equal(t, s.token, c.token, "A still held the lease when its context was cancelled")
	require.True(t, c.now.Before(c.leaseEnd),
		"A's context was cancelled at %s, not before its lease ran out at %s (database clock)", c.now, c.leaseEnd)

	select {
	case <-bHolds:
	case <-time.After(20 * time.Second):
		t.Fatal("B did not take the job after A's lease expired")
	}
	require.NoError(t, bSeen.err)
	require.NotEqual(t, s.token, bSeen.token, "B holds the job with a lease of its own")
	require.False(t, bSeen.now.Before(c.leaseEnd), "B started at %s, before A's lease ended at %s", bSeen.now, c.leaseEnd)

	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(aLogged(), "this result was not recorded")
	}, "A reports that its completion came too late")
	var job struct {
		Attempts   int
		State      int
		LeaseToken *string
	}
	require.NoError(t, db.NewRaw("SELECT attempts, state, lease_token FROM bunqueue_jobs WHERE id = ?", id).Scan(t.Context(), &job),
		"A's stale completion must not delete the job B holds")
	require.Equal(t, 2, job.Attempts)
	require.Equal(t, 0, job.State)
	require.NotNil(t, job.LeaseToken)
	require.Equal(t, bSeen.token, *job.LeaseToken, "the job is still B's")

	close(bRelease)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", id) == 0
	}, "B completes the job")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", id))
	require.Equal(t, int64(1), aCalls.Load())
	require.Equal(t, int64(1), bCalls.Load())
}

// A job of 5 s under a lease of 2 s, with two clients polling: the
// heartbeats keep extending the lease, so the job runs once, to the end,
// and completes.
func TestLeaseHeartbeatsKeepALongJob(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)

	type sample struct{ RunAt, Now time.Time }
	var (
		calls   atomic.Int64
		mu      sync.Mutex
		samples []sample
		result  error
	)
	work := bunqueue.WorkerFunc[leaseLongArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseLongArgs]) (err error) {
		if calls.Add(1) > 1 {
			return errors.New("the job ran twice")
		}
		defer func() { mu.Lock(); result = err; mu.Unlock() }()
		until := time.Now().Add(5 * time.Second)
		for {
			var s sample
			if err := db.NewRaw("SELECT run_at, "+nowSQL(db)+" FROM bunqueue_jobs WHERE id = ?", job.ID).Scan(ctx, &s.RunAt, &s.Now); err != nil {
				return err
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			if !time.Now().Before(until) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	var clients []*bunqueue.Client
	for range 2 {
		c := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: 2}, nil)
		require.NoError(t, bunqueue.AddWorker(c, work))
		clients = append(clients, c)
	}
	id := leaseEnqueue(t, clients[0], db, leaseLongArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
	for _, c := range clients {
		start(t, c)
	}
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", id) == 0
	}, "the job completes")
	time.Sleep(300 * time.Millisecond) // room for a wrong second run
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, result)
	require.Equal(t, int64(1), calls.Load(), "the job ran once")
	require.GreaterOrEqual(t, len(samples), 10)
	for _, s := range samples {
		require.True(t, s.Now.Before(s.RunAt), "the lease lapsed while the job ran: run_at %s, now %s", s.RunAt, s.Now)
	}
	first, last := samples[0], samples[len(samples)-1]
	require.GreaterOrEqual(t, last.RunAt.Sub(first.RunAt), 2*time.Second, "the heartbeats extended the lease: run_at went from %s to %s", first.RunAt, last.RunAt)
	require.GreaterOrEqual(t, last.Now.Sub(first.Now), 4*time.Second)
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", id))
}

// Stop with an expired context while every worker runs a job and holds
// more leased jobs of its batch: the running jobs' contexts are cancelled,
// no waiting job of a batch is started, and every job is given back at
// once: no lease token, attempts as before, runnable now.
func TestLeaseStopWithExpiredContextReleasesEveryJob(t *testing.T) {
	t.Parallel()
	const (
		jobs    = 30
		workers = 4
		batch   = 3
	)
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)

	var started, cancelled, lateStarts atomic.Int64
	c := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: workers, BatchSize: batch, Lease: 10 * time.Second}, nil)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseStopArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseStopArgs]) error {
		started.Add(1)
		if ctx.Err() != nil {
			lateStarts.Add(1)
		}
		select {
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return errors.New("not cancelled")
		}
	})))
	params := make([]bunqueue.EnqueueParams, jobs)
	for i := range params {
		params[i] = bunqueue.EnqueueParams{Args: leaseStopArgs{N: i}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	}
	n, err := c.EnqueueMany(t.Context(), db, params)
	require.NoError(t, err)
	require.Equal(t, jobs, n)

	require.NoError(t, c.Start(t.Context()))
	eventually(t, 10*time.Second, func() bool { return started.Load() == workers }, "every worker runs a job")
	require.Equal(t, workers*batch, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND lease_token IS NOT NULL", queue),
		"every worker leased a full batch")

	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	require.ErrorIs(t, c.Stop(ctx), context.DeadlineExceeded)
	require.Equal(t, started.Load(), cancelled.Load(), "every running job's context was cancelled")
	require.Zero(t, lateStarts.Load(), "a job was started after Stop cancelled the workers")
	require.Equal(t, int64(workers), started.Load())

	require.Equal(t, jobs, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "no job completed or failed")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND lease_token IS NOT NULL", queue), "nothing is left leased")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND attempts <> 0", queue), "no attempt was used")
	require.Equal(t, jobs, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND run_at <= "+nowSQL(db), queue), "every job is runnable now")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))

	// Runnable at once, for real: a new client runs them all, first attempts.
	var again, notFirst atomic.Int64
	c2 := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: workers, BatchSize: batch}, nil)
	require.NoError(t, bunqueue.AddWorker(c2, bunqueue.WorkerFunc[leaseStopArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseStopArgs]) error {
		again.Add(1)
		if job.Attempt != 1 {
			notFirst.Add(1)
		}
		return nil
	})))
	start(t, c2)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "a new client runs the released jobs")
	require.Equal(t, int64(jobs), again.Load())
	require.Zero(t, notFirst.Load())
}

// In lease mode, Snooze gives the job back without using an attempt; a
// failure records the attempt, the error and the backoff. Both clear the
// lease token.
func TestLeaseSnoozeAndFailureRecordAttemptsAndClearTheLease(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := jobQueue(t)
	leaseCleanupQueue(t, db, queue)

	var mu sync.Mutex
	var snoozeAttempts, failAttempts []int
	c := leaseClient(t, dbtest.Open(t, 0), queue, bunqueue.JobQueueConfig{Workers: 2},
		&bunqueue.Config{Backoff: func(int) time.Duration { return time.Hour }})
	require.NoError(t, errors.Join(
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseSnoozeArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseSnoozeArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			snoozeAttempts = append(snoozeAttempts, job.Attempt)
			if len(snoozeAttempts) == 1 {
				return bunqueue.Snooze(time.Hour)
			}
			return nil
		})),
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[leaseFailArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[leaseFailArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			failAttempts = append(failAttempts, job.Attempt)
			if len(failAttempts) == 1 {
				return errors.New("lease-mode failure 1")
			}
			return nil
		})),
	))
	snoozed := leaseEnqueue(t, c, db, leaseSnoozeArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
	failed := leaseEnqueue(t, c, db, leaseFailArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
	start(t, c)

	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ? AND lease_token IS NULL "+
			"AND run_at > "+plusSQL(db, 59*time.Minute), snoozed) == 1
	}, "the snoozed job is given back for an hour")
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ? AND lease_token IS NULL "+
			"AND run_at > "+plusSQL(db, 59*time.Minute), failed) == 1
	}, "the failed job waits for its backoff of an hour")

	type state struct {
		Attempts   int
		LastError  *string
		LeaseToken *string
		RunAt      time.Time
		Now        time.Time
	}
	read := func(id int64) state {
		var s state
		require.NoError(t, db.NewRaw("SELECT attempts, last_error, lease_token, run_at, "+nowSQL(db)+" FROM bunqueue_jobs WHERE id = ?", id).
			Scan(t.Context(), &s.Attempts, &s.LastError, &s.LeaseToken, &s.RunAt, &s.Now))
		return s
	}
	s := read(snoozed)
	require.Equal(t, 0, s.Attempts, "a snooze uses no attempt")
	require.Nil(t, s.LeaseToken)
	require.InDelta(t, time.Hour.Seconds(), s.RunAt.Sub(s.Now).Seconds(), 60)
	f := read(failed)
	require.Equal(t, 1, f.Attempts, "a failure uses its attempt")
	require.Nil(t, f.LeaseToken)
	require.NotNil(t, f.LastError)
	require.Equal(t, "lease-mode failure 1", *f.LastError)
	require.InDelta(t, time.Hour.Seconds(), f.RunAt.Sub(f.Now).Seconds(), 60, "the backoff is Config.Backoff's")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))

	// Make both due: they run again and complete.
	dbtest.Exec(t, db, fmt.Sprintf("UPDATE bunqueue_jobs SET run_at = "+nowSQL(db)+" WHERE id IN (%d, %d)", snoozed, failed))
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id IN (?, ?)", snoozed, failed) == 0
	}, "both jobs complete")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 1}, snoozeAttempts, "the run after a snooze is still the first attempt")
	require.Equal(t, []int{1, 2}, failAttempts)
}

// leaseCaptureLogger returns a logger that writes to the test log and keeps
// what it wrote, and a function that returns it.
func leaseCaptureLogger(t *testing.T) (*slog.Logger, func() string) {
	w := &leaseCaptureWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})), w.String
}

type leaseCaptureWriter struct {
	mu   sync.Mutex
	t    *testing.T
	buf  bytes.Buffer
	done bool
}

func (w *leaseCaptureWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done {
		w.t.Log(string(bytes.TrimSpace(p)))
	}
	return len(p), nil
}

func (w *leaseCaptureWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// leaseLockedBuffer is a bytes.Buffer safe for concurrent use.
type leaseLockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *leaseLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *leaseLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
