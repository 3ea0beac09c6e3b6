package bunqueue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Helpers shared by the jobs tests of jobs_lock_test.go, enqueue_test.go,
// failed_test.go and migrate_test.go.

// ownJobQueue returns a fresh queue name for the test and deletes the rows
// of that queue from both jobs tables when the test ends. Call it before
// start, so that the rows are deleted after the client stopped.
func ownJobQueue(t *testing.T, db *bun.DB) string {
	t.Helper()
	q := jobQueue(t)
	t.Cleanup(func() { deleteJobQueueRows(db, q) })
	return q
}

func deleteJobQueueRows(db *bun.DB, queue string) {
	ctx := context.Background()
	_, _ = db.NewRaw("DELETE FROM bunqueue_jobs WHERE queue = ?", queue).Exec(ctx)
	_, _ = db.NewRaw("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue).Exec(ctx)
}

// jobsTestClient returns a client over db configured by cfg, with a fast
// poll and the test's logger unless cfg sets them.
func jobsTestClient(t *testing.T, db *bun.DB, cfg bunqueue.Config) *bunqueue.Client {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	c, err := bunqueue.NewClient(db, &cfg)
	require.NoError(t, err)
	return c
}

// fastBackoff keeps retries quick where the growth of the wait is not the
// point of the test.
func fastBackoff(int) time.Duration { return 50 * time.Millisecond }

// failedByJobID returns the failed-jobs row of the job with that id in
// bunqueue_jobs, if there is one.
func failedByJobID(t *testing.T, db bun.IDB, jobID int64) (bunqueue.FailedJob, bool) {
	t.Helper()
	var f bunqueue.FailedJob
	err := db.NewSelect().Model(&f).Where("job_id = ?", jobID).Limit(1).Scan(context.Background())
	if errors.Is(err, sql.ErrNoRows) {
		return f, false
	}
	require.NoError(t, err)
	return f, true
}

// waitFailed waits for the job to land in the failed-jobs table and returns
// its row there.
func waitFailed(t *testing.T, db bun.IDB, jobID int64, wait time.Duration) bunqueue.FailedJob {
	t.Helper()
	var f bunqueue.FailedJob
	eventually(t, wait, func() bool {
		var ok bool
		f, ok = failedByJobID(t, db, jobID)
		return ok
	}, "job %d reaches the failed jobs", jobID)
	return f
}

// jobExists reports whether the job is still in bunqueue_jobs.
func jobExists(t *testing.T, db bun.IDB, jobID int64) bool {
	t.Helper()
	return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", jobID) > 0
}

// enqueueOne enqueues args through db and returns the job's id.
func enqueueOne(t *testing.T, c *bunqueue.Client, db bun.IDB, args bunqueue.JobArgs, opts *bunqueue.EnqueueOpts) int64 {
	t.Helper()
	res, err := c.Enqueue(t.Context(), db, args, opts)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.NotZero(t, res.ID)
	return res.ID
}

// insertRawJob writes a job straight into bunqueue_jobs, bypassing Enqueue,
// with args (and metadata, if not nil) stored exactly as given.
func insertRawJob(t *testing.T, db bun.IDB, queue, kind string, args, metadata []byte, priority, maxAttempts int) int64 {
	t.Helper()
	var meta any
	if metadata != nil {
		meta = metadata
	}
	return insertID(t, db, `INSERT INTO bunqueue_jobs (queue, kind, args, metadata, priority, max_attempts, run_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, `+nowSQL(db)+`, `+nowSQL(db)+`)`, queue, kind, args, meta, priority, maxAttempts)
}

// seenAttempt is what one attempt of a job saw, read through the job's own
// transaction: the database clock when it started, and its row.
type seenAttempt struct {
	Attempt   int
	Now       time.Time // UTC_TIMESTAMP(6) when the attempt ran
	RunAt     time.Time // Job.RunAt
	CreatedAt time.Time // Job.CreatedAt
	Attempts  int       // the attempts column
	LastError sql.NullString
	Args      []byte // the args column, raw
}

func seeAttempt(ctx context.Context, db bun.IDB, id int64, attempt int, runAt, createdAt time.Time) (seenAttempt, error) {
	s := seenAttempt{Attempt: attempt, RunAt: runAt, CreatedAt: createdAt}
	err := db.NewRaw("SELECT "+nowSQL(db)+", attempts, last_error, args FROM bunqueue_jobs WHERE id = ?", id).
		Scan(ctx, &s.Now, &s.Attempts, &s.LastError, &s.Args)
	return s, err
}

// attemptLog records the attempts of jobs, by a name the test gives them.
type attemptLog struct {
	mu   sync.Mutex
	seen map[string][]seenAttempt
}

func (l *attemptLog) add(name string, s seenAttempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string][]seenAttempt{}
	}
	l.seen[name] = append(l.seen[name], s)
}

func (l *attemptLog) get(name string) []seenAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[name])
}

type backoffArgs struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func (backoffArgs) Kind() string { return "t_backoff" }

// A job that keeps failing waits Backoff(attempt) after each failure, by
// the database clock; its attempts count and last error are kept; after
// MaxAttempts it moves to the failed jobs with its payload byte for byte
// (also a payload with odd spacing and key order, written straight into the
// table), its error and attempts, and leaves bunqueue_jobs. RetryFailed
// puts it back with fresh attempts, the same bytes and its creation time.
func TestJobBackoffThenFailedThenRetried(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	const step = time.Second
	c := jobsTestClient(t, db, bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}},
		Backoff:   func(attempt int) time.Duration { return time.Duration(attempt) * step },
	})
	var healed atomic.Bool
	var log attemptLog
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[backoffArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[backoffArgs]) error {
		s, err := seeAttempt(ctx, db, job.ID, job.Attempt, job.RunAt, job.CreatedAt)
		if err != nil {
			return err
		}
		log.add(job.Args.Name, s)
		if healed.Load() {
			return nil
		}
		return fmt.Errorf("t_backoff: failure %d of %s", job.Attempt, job.Args.Name)
	})))

	argsA := backoffArgs{Name: "a", N: 1}
	rawA, err := json.Marshal(argsA)
	require.NoError(t, err)
	rawB := []byte("{ \"n\" :2,\n\t\"name\":   \"b\" , \"extra\":[1, 2 ]}  ")
	ids := map[string]int64{
		"a": enqueueOne(t, c, db, argsA, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3, Priority: 7}),
		"b": insertRawJob(t, db, queue, "t_backoff", rawB, nil, 7, 3),
	}
	raw := map[string][]byte{"a": rawA, "b": rawB}
	start(t, c)

	failed := map[string]bunqueue.FailedJob{}
	for name, id := range ids {
		failed[name] = waitFailed(t, db, id, 20*time.Second)
	}
	for name, id := range ids {
		seen := log.get(name)
		require.Len(t, seen, 3, "job %s: one run per attempt", name)
		for k, s := range seen {
			require.Equal(t, k+1, s.Attempt, "job %s", name)
			require.Equal(t, k, s.Attempts, "job %s: attempts counts the failures", name)
			require.Equal(t, raw[name], s.Args, "job %s: args bytes in bunqueue_jobs", name)
			require.False(t, s.Now.Before(s.RunAt), "job %s attempt %d ran at %s, before its run_at %s", name, s.Attempt, s.Now, s.RunAt)
			if k == 0 {
				require.False(t, s.LastError.Valid)
				continue
			}
			require.Equal(t, fmt.Sprintf("t_backoff: failure %d of %s", k, name), s.LastError.String, "last_error keeps the previous failure")
			// The failure was written after the previous attempt read the
			// clock: run_at is Backoff(k) after that, and not much more.
			wait := s.RunAt.Sub(seen[k-1].Now)
			want := time.Duration(k) * step
			require.GreaterOrEqual(t, wait, want, "job %s: wait after failure %d", name, k)
			require.Less(t, wait, want+500*time.Millisecond, "job %s: wait after failure %d", name, k)
		}

		f := failed[name]
		require.Equal(t, raw[name], f.Args, "job %s: the failed job keeps the payload byte for byte", name)
		require.Equal(t, fmt.Sprintf("t_backoff: failure 3 of %s", name), f.Error)
		require.Equal(t, 3, f.Attempts)
		require.Equal(t, 3, f.MaxAttempts)
		require.Equal(t, 7, f.Priority)
		require.Equal(t, queue, f.Queue)
		require.Equal(t, "t_backoff", f.Kind)
		require.Equal(t, id, f.JobID)
		require.True(t, f.CreatedAt.Equal(seen[0].CreatedAt), "created_at %s, want %s", f.CreatedAt, seen[0].CreatedAt)
		require.False(t, jobExists(t, db, id), "job %s left bunqueue_jobs", name)
	}

	healed.Store(true)
	newIDs := map[string]int64{}
	for name, f := range failed {
		newID, err := c.RetryFailed(t.Context(), f.ID)
		require.NoError(t, err)
		require.NotEqual(t, ids[name], newID)
		newIDs[name] = newID
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", f.ID), "RetryFailed removes the failed job")
	}
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the retried jobs run and complete")
	for name := range ids {
		seen := log.get(name)
		require.Len(t, seen, 4, "job %s runs once more", name)
		s := seen[3]
		require.Equal(t, 1, s.Attempt, "a retried job starts its attempts afresh")
		require.Equal(t, 0, s.Attempts)
		require.False(t, s.LastError.Valid)
		require.Equal(t, raw[name], s.Args, "job %s: the retried job has the payload byte for byte", name)
		require.True(t, s.CreatedAt.Equal(seen[0].CreatedAt), "the retried job keeps its created_at")
		_, stillFailed := failedByJobID(t, db, newIDs[name])
		require.False(t, stillFailed)
	}
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
}

type defaultBackoffArgs struct{}

func (defaultBackoffArgs) Kind() string { return "t_default_backoff" }

// The default backoff waits BackoffBase (±BackoffJitter) after the first
// failure, by the database clock.
func TestJobDefaultBackoff(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	var log attemptLog
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[defaultBackoffArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[defaultBackoffArgs]) error {
		s, err := seeAttempt(ctx, db, job.ID, job.Attempt, job.RunAt, job.CreatedAt)
		if err != nil {
			return err
		}
		log.add("x", s)
		if job.Attempt == 1 {
			return errors.New("t_default_backoff: first attempt fails")
		}
		return nil
	})))
	id := enqueueOne(t, c, db, defaultBackoffArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, id) }, "the job completes on its second attempt")
	seen := log.get("x")
	require.Len(t, seen, 2)
	require.Equal(t, 1, seen[1].Attempts)
	require.Equal(t, "t_default_backoff: first attempt fails", seen[1].LastError.String)
	wait := seen[1].RunAt.Sub(seen[0].Now)
	lo := time.Duration(float64(bunqueue.BackoffBase) * (1 - bunqueue.BackoffJitter))
	hi := time.Duration(float64(bunqueue.BackoffBase)*(1+bunqueue.BackoffJitter)) + 500*time.Millisecond
	require.GreaterOrEqual(t, wait, lo)
	require.Less(t, wait, hi)
	require.False(t, seen[1].Now.Before(seen[1].RunAt), "the retry ran before its run_at")
}

type snoozeArgs struct{}

func (snoozeArgs) Kind() string { return "t_snooze" }

// Snooze runs the job again after the given wait, by the database clock,
// without using an attempt: a job with two attempts snoozes three times and
// still completes.
func TestJobSnoozeKeepsAttempts(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	const snooze = 200 * time.Millisecond
	var log attemptLog
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[snoozeArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[snoozeArgs]) error {
		s, err := seeAttempt(ctx, db, job.ID, job.Attempt, job.RunAt, job.CreatedAt)
		if err != nil {
			return err
		}
		log.add("x", s)
		if len(log.get("x")) <= 3 {
			return bunqueue.Snooze(snooze)
		}
		return nil
	})))
	id := enqueueOne(t, c, db, snoozeArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, id) }, "the job completes")
	seen := log.get("x")
	require.Len(t, seen, 4)
	for k, s := range seen {
		require.Equal(t, 1, s.Attempt, "a snooze does not use an attempt")
		require.Equal(t, 0, s.Attempts)
		if k > 0 {
			wait := s.RunAt.Sub(seen[k-1].Now)
			require.GreaterOrEqual(t, wait, snooze)
			require.Less(t, wait, snooze+500*time.Millisecond)
			require.False(t, s.Now.Before(s.RunAt))
		}
	}
	_, failed := failedByJobID(t, db, id)
	require.False(t, failed)
}

type cancelArgs struct {
	Key string `json:"key"`
}

func (cancelArgs) Kind() string { return "t_cancel" }

// Cancel moves the job to the failed jobs at its first attempt, with its
// error, whatever attempts it had left, and releases its unique key.
func TestJobCancelFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: fastBackoff})
	var calls atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[cancelArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[cancelArgs]) error {
		calls.Add(1)
		return bunqueue.Cancel(errors.New("t_cancel: input rejected"))
	})))
	key := queue + "-cancel"
	opts := &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 5, UniqueKey: key}
	id := enqueueOne(t, c, db, cancelArgs{Key: key}, opts)
	start(t, c)
	f := waitFailed(t, db, id, 10*time.Second)
	require.Equal(t, 1, f.Attempts)
	require.Equal(t, 5, f.MaxAttempts)
	require.Contains(t, f.Error, "t_cancel: input rejected")
	require.NotNil(t, f.UniqueKey)
	require.Equal(t, key, *f.UniqueKey)
	require.False(t, jobExists(t, db, id))
	require.EqualValues(t, 1, calls.Load())

	// The key is free again.
	id2 := enqueueOne(t, c, db, cancelArgs{Key: key}, opts)
	require.NotEqual(t, id, id2)
	waitFailed(t, db, id2, 10*time.Second)
	require.EqualValues(t, 2, calls.Load())
}

type panicArgs struct {
	Boom bool `json:"boom"`
}

func (panicArgs) Kind() string { return "t_panic" }

// A panic is a failure: the job is retried, the failed job keeps the
// panic's stack, and the worker goes on with other jobs.
func TestJobPanicIsRetriedWithStack(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: fastBackoff})
	var booms, oks atomic.Int64
	var mu sync.Mutex
	var lastErrAtRetry sql.NullString
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[panicArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[panicArgs]) error {
		if !job.Args.Boom {
			oks.Add(1)
			return nil
		}
		booms.Add(1)
		if job.Attempt == 2 {
			mu.Lock()
			err := db.NewRaw("SELECT last_error FROM bunqueue_jobs WHERE id = ?", job.ID).Scan(ctx, &lastErrAtRetry)
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		panic(fmt.Sprintf("t_panic: boom at attempt %d", job.Attempt))
	})))
	id := enqueueOne(t, c, db, panicArgs{Boom: true}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	start(t, c)
	f := waitFailed(t, db, id, 10*time.Second)
	require.EqualValues(t, 2, booms.Load(), "the panicking job is retried")
	require.Equal(t, 2, f.Attempts)
	require.Contains(t, f.Error, "handler panicked: t_panic: boom at attempt 2")
	require.Contains(t, f.Error, "goroutine ", "the stack is kept")
	require.Contains(t, f.Error, "jobs_lock_test.go", "the stack names the panicking worker")
	mu.Lock()
	lastErr := lastErrAtRetry
	mu.Unlock()
	require.True(t, lastErr.Valid)
	require.Contains(t, lastErr.String, "boom at attempt 1", "last_error keeps the panic")
	require.Contains(t, lastErr.String, "jobs_lock_test.go", "last_error keeps the stack")

	id2 := enqueueOne(t, c, db, panicArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, id2) }, "the worker survived the panics")
	require.EqualValues(t, 1, oks.Load())
}

type noWorkerOKArgs struct {
	N int `json:"n"`
}

func (noWorkerOKArgs) Kind() string { return "t_noworker_ok" }

type noWorkerMissingArgs struct{}

func (noWorkerMissingArgs) Kind() string { return "t_noworker_missing" }

// A job whose kind has no worker in this process fails with an error that
// says so, is retried, and ends in the failed jobs; the other jobs of the
// queue keep flowing.
func TestJobWithoutWorker(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: fastBackoff})
	var mu sync.Mutex
	var ran []int
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[noWorkerOKArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[noWorkerOKArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.Args.N)
		return nil
	})))
	missing := enqueueOne(t, c, db, noWorkerMissingArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2, Priority: -1})
	for n := range 5 {
		enqueueOne(t, c, db, noWorkerOKArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue})
	}
	start(t, c)
	f := waitFailed(t, db, missing, 10*time.Second)
	require.Equal(t, 2, f.Attempts, "the job without a worker is retried")
	require.Contains(t, f.Error, `no worker for kind "t_noworker_missing"`)
	require.Contains(t, f.Error, "AddWorker")
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the other jobs run")
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ran)
	require.Equal(t, []int{0, 1, 2, 3, 4}, ran)
}

type corruptArgs struct {
	N int `json:"n"`
}

func (corruptArgs) Kind() string { return "t_corrupt" }

// A row whose args (or metadata) are not valid JSON fails for good at its
// first attempt, with the decode error and its bytes as they were; the
// worker never sees it and the other jobs of the queue run.
func TestJobCorruptPayload(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: fastBackoff})
	var mu sync.Mutex
	var ran []int
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[corruptArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[corruptArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.Args.N)
		return nil
	})))
	badArgs := []byte("not json {\x00\xff")
	badArgsID := insertRawJob(t, db, queue, "t_corrupt", badArgs, nil, -1, 25)
	badMetaID := insertRawJob(t, db, queue, "t_corrupt", []byte(`{"n":0}`), []byte(`[1,2`), -1, 25)
	for n := 1; n <= 3; n++ {
		enqueueOne(t, c, db, corruptArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue})
	}
	start(t, c)

	f := waitFailed(t, db, badArgsID, 10*time.Second)
	require.Equal(t, 1, f.Attempts, "a payload that cannot be decoded is not retried")
	require.Contains(t, f.Error, fmt.Sprintf("decode the args of job %d", badArgsID))
	require.Contains(t, f.Error, "invalid character")
	require.Equal(t, badArgs, f.Args)

	f = waitFailed(t, db, badMetaID, 10*time.Second)
	require.Equal(t, 1, f.Attempts)
	require.Contains(t, f.Error, fmt.Sprintf("decode the metadata of job %d", badMetaID))
	require.Equal(t, []byte(`[1,2`), f.Metadata)

	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the good jobs run")
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ran)
	require.Equal(t, []int{1, 2, 3}, ran, "the worker never sees the corrupt jobs")
}

type writesArgs struct {
	Name string `json:"name"`
}

func (writesArgs) Kind() string { return "t_writes" }

// What a worker writes through db in lock mode commits with the job's
// completion, and is undone when the attempt fails, panics, snoozes or
// cancels.
func TestJobWorkerWritesFollowTheJob(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	table := dbtest.Name("bq_test_jobwrites")
	createTable(t, db, table, "name VARCHAR(32) NOT NULL, attempt INT NOT NULL, calls INT NOT NULL")
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: fastBackoff})
	var mu sync.Mutex
	calls := map[string]int{}
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[writesArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[writesArgs]) error {
		mu.Lock()
		calls[job.Args.Name]++
		n := calls[job.Args.Name]
		mu.Unlock()
		if _, err := db.NewRaw("INSERT INTO ? (name, attempt, calls) VALUES (?, ?, ?)",
			bun.Ident(table), job.Args.Name, job.Attempt, n).Exec(ctx); err != nil {
			return err
		}
		switch {
		case job.Args.Name == "ok":
			return nil
		case job.Args.Name == "retry" && job.Attempt == 2:
			return nil
		case job.Args.Name == "snooze" && n == 2:
			return nil
		case job.Args.Name == "snooze":
			return bunqueue.Snooze(50 * time.Millisecond)
		case job.Args.Name == "cancel":
			return bunqueue.Cancel(errors.New("t_writes: cancelled"))
		case job.Args.Name == "panic":
			panic("t_writes: panic")
		}
		return errors.New("t_writes: failed")
	})))
	ids := map[string]int64{}
	for _, name := range []string{"ok", "retry", "snooze", "fail", "cancel", "panic"} {
		ids[name] = enqueueOne(t, c, db, writesArgs{Name: name}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	}
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "every job completes or fails")
	for _, name := range []string{"fail", "cancel", "panic"} {
		_, ok := failedByJobID(t, db, ids[name])
		require.True(t, ok, "job %s failed", name)
	}
	type written struct {
		Name    string
		Attempt int
		Calls   int
	}
	var got []written
	require.NoError(t, db.NewRaw("SELECT name, attempt, calls FROM ? ORDER BY name", bun.Ident(table)).Scan(t.Context(), &got))
	require.Equal(t, []written{
		{"ok", 1, 1},
		{"retry", 2, 2},
		{"snooze", 1, 2},
	}, got, "only the writes of the attempts that succeeded are kept, once each")
}

type orderArgs struct {
	Label string `json:"label"`
}

func (orderArgs) Kind() string { return "t_order" }

// One worker runs the jobs of a queue by priority (lower first), then
// run_at, then id; a job scheduled in the future waits until it is due,
// by the database clock, whatever its priority.
func TestJobOrderAndSchedule(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1, BatchSize: 1}}})
	var mu sync.Mutex
	var order []string
	var futureRan, futureDue time.Time
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[orderArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[orderArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, job.Args.Label)
		if job.Args.Label == "future" {
			futureDue = job.RunAt
			return db.NewRaw("SELECT "+nowSQL(db)).Scan(ctx, &futureRan)
		}
		return nil
	})))
	base := time.Now().Add(-time.Hour)
	for _, j := range []struct {
		label    string
		priority int
		runAt    time.Time
	}{
		{"p5-old", 5, base},
		{"m1-new", -1, base.Add(2 * time.Second)},
		{"m1-old", -1, base.Add(time.Second)},
		{"z-a", 0, base.Add(time.Second)},
		{"z-b", 0, base.Add(time.Second)},
		{"future", -5, time.Now().Add(1500 * time.Millisecond)},
		{"z-now", 0, time.Time{}},
		{"p5-new", 5, base.Add(3 * time.Second)},
	} {
		enqueueOne(t, c, db, orderArgs{Label: j.label}, &bunqueue.EnqueueOpts{Queue: queue, Priority: j.priority, RunAt: j.runAt})
	}
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "every job runs")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"m1-old", "m1-new", "z-a", "z-b", "z-now", "p5-old", "p5-new", "future"}, order)
	require.False(t, futureRan.Before(futureDue), "the future job ran at %s, before it was due at %s", futureRan, futureDue)
}

type retentionArgs struct {
	N int `json:"n"`
}

func (retentionArgs) Kind() string { return "t_retention" }

// With Config.Retention, a completed job stays as state 1 with its
// completed_at, its unique key is free at once, and the cleaner deletes it
// once the retention has passed, not before.
func TestJobRetention(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	const retention = 3 * time.Second
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Retention: retention})
	var runs atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[retentionArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[retentionArgs]) error {
		runs.Add(1)
		return nil
	})))
	key := queue + "-retained"
	id := enqueueOne(t, c, db, retentionArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key})
	start(t, c)

	type doneRow struct {
		State       int
		CompletedAt *time.Time
		UniqueKey   *string
		LastError   *string
		Age         int64 // µs since completed_at, by the database clock
	}
	read := func(id int64) (doneRow, bool) {
		var r []doneRow
		require.NoError(t, db.NewRaw(`SELECT state, completed_at, unique_key, last_error,
	`+diffSQL(db, "MICROSECOND", "completed_at", nowSQL(db))+` AS age FROM bunqueue_jobs WHERE id = ?`, id).Scan(t.Context(), &r))
		if len(r) == 0 {
			return doneRow{}, false
		}
		return r[0], true
	}
	var r doneRow
	found := true
	eventually(t, 10*time.Second, func() bool {
		r, found = read(id)
		return !found || r.State == 1
	}, "the job completes")
	require.True(t, found, "the completed job was deleted before its retention")
	require.NotNil(t, r.CompletedAt)
	require.Nil(t, r.UniqueKey, "the unique key is released")
	require.Nil(t, r.LastError)
	require.Less(t, r.Age, retention.Microseconds(), "read within the retention")

	// The key is free while the completed row is kept.
	res, err := c.Enqueue(t.Context(), db, retentionArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.NotEqual(t, id, res.ID)

	var last doneRow
	eventually(t, retention+10*time.Second, func() bool {
		r, ok := read(id)
		if ok {
			last = r
			return false
		}
		return true
	}, "the cleaner deletes the completed job")
	// The last time the row was seen, it was at most a poll older than
	// the retention: it was not deleted early.
	require.Greater(t, last.Age, (retention - time.Second).Microseconds(), "the completed job was deleted before its retention")
	eventually(t, retention+10*time.Second, func() bool { _, ok := read(res.ID); return !ok }, "the second job runs and is cleaned too")
	require.EqualValues(t, 2, runs.Load())
}

type timeoutArgs struct {
	SQL bool `json:"sql"`
}

func (timeoutArgs) Kind() string { return "t_timeout" }

// JobQueueConfig.Timeout cancels the context of a slow attempt, which is
// recorded as a failure: retried, then failed with the context's error.
func TestJobTimeout(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	const timeout = 300 * time.Millisecond
	c := jobsTestClient(t, db, bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Timeout: timeout}},
		Backoff:   fastBackoff,
	})
	var mu sync.Mutex
	var took []time.Duration
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[timeoutArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[timeoutArgs]) error {
		began := time.Now()
		defer func() {
			mu.Lock()
			took = append(took, time.Since(began))
			mu.Unlock()
		}()
		if job.Args.SQL {
			_, err := db.NewRaw(dbtest.Sleep(5)).Exec(ctx)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	})))
	id := enqueueOne(t, c, db, timeoutArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	start(t, c)
	f := waitFailed(t, db, id, 10*time.Second)
	require.Equal(t, 2, f.Attempts, "a timed-out attempt is retried")
	require.Contains(t, f.Error, context.DeadlineExceeded.Error())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, took, 2)
	for _, d := range took {
		// The deadline is set just before the worker starts its clock.
		require.GreaterOrEqual(t, d, timeout-50*time.Millisecond)
		require.Less(t, d, timeout+2*time.Second)
	}
}

type sqlTimeoutArgs struct {
	Mode string `json:"mode"` // "return", "swallow" or "ok"
}

func (sqlTimeoutArgs) Kind() string { return "t_timeout_sql" }

// A job that times out while it waits on the database through its own
// transaction loses that transaction (the driver closes the connection of
// a cancelled query): its attempt is still recorded, promptly, whether the
// worker returns the error or swallows it; its writes are undone; the
// other jobs of the queue run.
func TestJobTimeoutInSQL(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	table := dbtest.Name("bq_test_timeoutsql")
	createTable(t, db, table, "mode VARCHAR(16) NOT NULL")
	const timeout = 300 * time.Millisecond
	c := jobsTestClient(t, db, bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Timeout: timeout, Workers: 2}},
		Backoff:   fastBackoff,
	})
	var mu sync.Mutex
	calls := map[string]int{}
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[sqlTimeoutArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[sqlTimeoutArgs]) error {
		mu.Lock()
		calls[job.Args.Mode]++
		mu.Unlock()
		if _, err := db.NewRaw("INSERT INTO ? (mode) VALUES (?)", bun.Ident(table), job.Args.Mode).Exec(ctx); err != nil {
			return err
		}
		if job.Args.Mode == "ok" {
			return nil
		}
		_, err := db.NewRaw(dbtest.Sleep(20)).Exec(ctx)
		if job.Args.Mode == "swallow" {
			return nil
		}
		return err
	})))
	began := time.Now()
	ids := map[string]int64{}
	for _, mode := range []string{"return", "swallow"} {
		ids[mode] = enqueueOne(t, c, db, sqlTimeoutArgs{Mode: mode}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	}
	start(t, c)
	for mode, id := range ids {
		f := waitFailed(t, db, id, 15*time.Second)
		require.Equal(t, 2, f.Attempts, "job %s", mode)
		require.Contains(t, f.Error, context.DeadlineExceeded.Error(), "job %s", mode)
	}
	// Without ending the server's session, each attempt would wait for its
	// 20 s SLEEP to end before the job could be claimed again.
	require.Less(t, time.Since(began), 10*time.Second, "the failures are recorded without waiting for the lost queries")
	ok := enqueueOne(t, c, db, sqlTimeoutArgs{Mode: "ok"}, &bunqueue.EnqueueOpts{Queue: queue})
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, ok) }, "the other jobs run")
	var modes []string
	require.NoError(t, db.NewRaw("SELECT mode FROM ?", bun.Ident(table)).Scan(t.Context(), &modes))
	require.Equal(t, []string{"ok"}, modes, "the writes of the timed-out attempts are undone")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"return": 2, "swallow": 2, "ok": 1}, calls)
}
