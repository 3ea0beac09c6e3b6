package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/bunqueuetest"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of package bunqueuetest, on every server: its checks pass on
// the jobs they should find and fail, with a message that says what they
// found instead, on those they should not; Work runs a job through the
// worker path of each mode and reports each outcome.

type bqtArgs struct {
	N    int    `json:"n"`
	Name string `json:"name"`
	// What the worker does: "" completes (writing an effect), "fail",
	// "panic", "snooze" or "cancel".
	Do string `json:"do,omitempty"`
}

func (bqtArgs) Kind() string { return "bq_test_bqtest" }

type bqtOther struct{}

func (bqtOther) Kind() string { return "bq_test_bqtest_other" }

// bqtNone is a kind that no test enqueues.
type bqtNone struct{}

func (bqtNone) Kind() string { return "bq_test_bqtest_none" }

type bqtSolo struct {
	N int `json:"n"`
}

func (bqtSolo) Kind() string { return "bq_test_bqtest_solo" }

// fakeTB records the failures of a check, which a real test's Fatalf
// would end.
type fakeTB struct {
	testing.TB
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

// failed requires one failure whose message has each of parts.
func (f *fakeTB) failed(t *testing.T, parts ...string) {
	t.Helper()
	require.Len(t, f.fatals, 1, "the check failed once")
	t.Log(f.fatals[0])
	for _, p := range parts {
		require.Contains(t, f.fatals[0], p)
	}
	f.fatals = nil
}

func TestBunqueuetestRequire(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(ctx, db))
		queue, other := jobQueue(t), jobQueue(t)
		t.Cleanup(func() { deleteJobQueueRows(db, queue); deleteJobQueueRows(db, other) })
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t),
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}, other: {}}})
		require.NoError(t, err)

		runAt := time.Now().Add(time.Hour).UTC()
		opts := &bunqueue.EnqueueOpts{Queue: queue, Priority: 3, MaxAttempts: 4, UniqueKey: dbtest.Name("key"),
			Metadata: map[string]string{"tenant": "acme", "by": "test"}, RunAt: runAt}
		id := enqueueOne(t, c, db, bqtArgs{N: 1, Name: "one"}, opts)
		enqueueOne(t, c, db, bqtArgs{N: 2, Name: "two"}, &bunqueue.EnqueueOpts{Queue: other, Delay: time.Hour})

		// Found by args alone, in part, and by every option.
		three := 3
		job := bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})
		require.Equal(t, id, job.ID)
		require.Equal(t, bqtArgs{N: 1, Name: "one"}, job.Args)
		require.Equal(t, 4, job.MaxAttempts)
		require.Equal(t, opts.UniqueKey, job.UniqueKey)
		require.Equal(t, opts.Metadata, job.Metadata)
		require.WithinDuration(t, runAt, job.RunAt, time.Microsecond)
		full := &bunqueuetest.RequireEnqueuedOpts{Queue: queue, Priority: &three, MaxAttempts: 4, UniqueKey: opts.UniqueKey,
			Metadata: map[string]string{"tenant": "acme"}, RunAt: runAt}
		require.Equal(t, id, bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{Name: "one"}, full).ID)
		bunqueuetest.RequireNotEnqueued(ctx, t, db, bqtArgs{N: 3}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})
		bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{N: 2}, &bunqueuetest.RequireEnqueuedOpts{Queue: other,
			RunAt: time.Now().Add(time.Hour), RunAtWithin: time.Minute})

		// Each check fails when it should, saying what it found.
		f := &fakeTB{}
		require.Nil(t, bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{N: 5}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue}))
		f.failed(t, `RequireEnqueued: no pending job of kind "bq_test_bqtest" matches`, fmt.Sprintf("job %d (queue %q, priority 3", id, queue),
			`args {"n":1,"name":"one"}`, "Args.N is 1, want 5")
		two := 2
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue, Priority: &two})
		f.failed(t, "Priority is 3, want 2")
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{Queue: other})
		f.failed(t, fmt.Sprintf("Queue is %q, want %q", queue, other))
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue, UniqueKey: "nope", MaxAttempts: 9})
		f.failed(t, `UniqueKey is "`+opts.UniqueKey+`", want "nope"`, "MaxAttempts is 4, want 9")
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue,
			Metadata: map[string]string{"tenant": "initech", "region": "eu"}})
		f.failed(t, `Metadata["region"] is missing, want "eu"`, `Metadata["tenant"] is "acme", want "initech"`)
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue, RunAt: runAt.Add(time.Second)})
		f.failed(t, "RunAt is ", "(-1s off")
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue, RunAtWithin: -time.Second})
		f.failed(t, "RequireEnqueuedOpts.RunAtWithin must not be negative, got -1s")
		bunqueuetest.RequireNotEnqueued(ctx, f, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{RunAtWithin: time.Second})
		f.failed(t, "RequireEnqueuedOpts.RunAtWithin is set without RunAt")
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtNone{}, nil)
		f.failed(t, `no pending job of kind "bq_test_bqtest_none"; pending jobs by kind: `, `"bq_test_bqtest" (`)
		// The jobs that differ are counted in words that agree with
		// their number.
		enqueueOne(t, c, db, bqtSolo{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtSolo{N: 3}, nil)
		f.failed(t, `no pending job of kind "bq_test_bqtest_solo" matches; the one pending job of the kind differs:`+"\n", "Args.N is 1, want 3")
		enqueueOne(t, c, db, bqtSolo{N: 2}, &bunqueue.EnqueueOpts{Queue: queue})
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtSolo{N: 3}, nil)
		f.failed(t, `no pending job of kind "bq_test_bqtest_solo" matches; the 2 pending jobs of the kind differ, the closest first:`+"\n")
		bunqueuetest.RequireEnqueued(ctx, f, db, bqtArgs{}, nil) // the jobs of both queues (and of other tests)
		f.failed(t, `pending jobs of kind "bq_test_bqtest" match, want exactly one`)
		bunqueuetest.RequireNotEnqueued(ctx, f, db, bqtArgs{Name: "one"}, nil)
		f.failed(t, `RequireNotEnqueued: 1 pending job of kind "bq_test_bqtest" matches, want none`, fmt.Sprintf("job %d (queue %q", id, queue))

		// Through a transaction: the jobs it enqueued, before it commits;
		// through the database, not yet.
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			res, err := c.Enqueue(ctx, tx, bqtArgs{N: 7}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			in := &bunqueuetest.RequireEnqueuedOpts{Queue: queue}
			require.Equal(t, res.ID, bunqueuetest.RequireEnqueuedTx(ctx, t, tx, bqtArgs{N: 7}, in).ID)
			bunqueuetest.RequireNotEnqueuedTx(ctx, f, tx, bqtArgs{N: 7}, in)
			f.failed(t, "RequireNotEnqueuedTx: 1 pending job of", fmt.Sprintf("job %d (queue %q", res.ID, queue))
			bunqueuetest.RequireNotEnqueuedTx(ctx, t, tx, bqtArgs{N: 8}, in)
			bunqueuetest.RequireEnqueuedTx(ctx, f, tx, bqtArgs{N: 8}, in)
			f.failed(t, "RequireEnqueuedTx: no pending job", "Args.N is 7, want 8")
			if srv.Name != "sqlite" { // one connection writes at a time there: db would wait for tx
				bunqueuetest.RequireNotEnqueued(ctx, t, db, bqtArgs{N: 7}, in)
			}
			return nil
		}))
		bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{N: 7}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})
	})
}

func TestBunqueuetestWork(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(ctx, db))
		effects := dbtest.Name("bq_test_bqtest_eff")
		srvTable(t, db, effects, "n BIGINT NOT NULL, queue VARCHAR(64) NOT NULL")
		for _, qc := range []bunqueue.JobQueueConfig{
			{Mode: bunqueue.ModeLock}, {Mode: bunqueue.ModeLease},
			{Mode: bunqueue.ModeLock, GlobalLimit: 1}, {Mode: bunqueue.ModeLease, GlobalLimit: 1}, // a slot, made by WorkJob as by Start
		} {
			mode := qc.Mode
			t.Run(fmt.Sprintf("%s_limit%d", mode, qc.GlobalLimit), func(t *testing.T) {
				queue := jobQueue(t)
				t.Cleanup(func() {
					deleteJobQueueRows(db, queue)
					_, _ = db.NewRaw("DELETE FROM bunqueue_slots WHERE queue = ?", queue).Exec(context.Background())
				})
				c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t), Backoff: func(int) time.Duration { return time.Hour },
					JobQueues: map[string]bunqueue.JobQueueConfig{queue: qc}})
				require.NoError(t, err)
				require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[bqtArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[bqtArgs]) error {
					if _, err := db.NewRaw("INSERT INTO ? (n, queue) VALUES (?, ?)", bun.Ident(effects), job.Args.N, queue).Exec(ctx); err != nil {
						return err
					}
					switch job.Args.Do {
					case "fail":
						return errors.New("this job fails (test)")
					case "panic":
						panic("this job panics (test)")
					case "snooze":
						return bunqueue.Snooze(time.Minute)
					case "cancel":
						return bunqueue.Cancel(errors.New("no such user (test)"))
					}
					return nil
				})))
				effectsOf := func(n int) int {
					return count(t, db, "SELECT COUNT(*) FROM ? WHERE queue = ? AND n = ?", bun.Ident(effects), queue, n)
				}
				in := &bunqueue.EnqueueOpts{Queue: queue}

				res := bunqueuetest.Work(ctx, t, c, bqtArgs{N: 1}, in)
				require.Equal(t, bunqueuetest.Completed, res.Outcome)
				require.NoError(t, res.Err)
				require.Equal(t, 1, res.Attempt)
				require.Equal(t, 1, effectsOf(1), "the worker's write committed")
				bunqueuetest.RequireNotEnqueued(ctx, t, db, bqtArgs{N: 1}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})

				res = bunqueuetest.Work(ctx, t, c, bqtArgs{N: 2, Do: "fail"}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
				require.Equal(t, bunqueuetest.Retried, res.Outcome)
				require.ErrorContains(t, res.Err, "this job fails (test)")
				require.Equal(t, time.Hour, res.RetryIn)
				job := bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{N: 2}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})
				require.Equal(t, 1, job.Attempts)
				f := &fakeTB{}
				require.Nil(t, bunqueuetest.WorkJob(ctx, f, c, job.ID))
				f.failed(t, fmt.Sprintf("WorkJob: bunqueue: job %d was not claimed: it is not due until", job.ID))

				res = bunqueuetest.Work(ctx, t, c, bqtArgs{N: 3, Do: "panic"}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1})
				require.Equal(t, bunqueuetest.Failed, res.Outcome)
				var pe *bunqueue.PanicError
				require.ErrorAs(t, res.Err, &pe)
				requireMovedToFailed(t, db, res.JobID, "this job panics (test)")

				res = bunqueuetest.Work(ctx, t, c, bqtArgs{N: 4, Do: "snooze"}, in)
				require.Equal(t, bunqueuetest.Snoozed, res.Outcome)
				require.Equal(t, time.Minute, res.RetryIn)
				require.Zero(t, bunqueuetest.RequireEnqueued(ctx, t, db, bqtArgs{N: 4}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue}).Attempts)

				res = bunqueuetest.Work(ctx, t, c, bqtArgs{N: 5, Do: "cancel"}, in)
				require.Equal(t, bunqueuetest.Cancelled, res.Outcome)
				requireMovedToFailed(t, db, res.JobID, "no such user (test)")

				if mode == bunqueue.ModeLock { // a failure undid the worker's write
					for n := 2; n <= 5; n++ {
						require.Zero(t, effectsOf(n), "effects of job %d", n)
					}
				}

				// What keeps a job from running fails the test.
				require.Nil(t, bunqueuetest.Work(ctx, f, c, bqtArgs{N: 6}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour}))
				f.failed(t, "Work: bunqueue: job ", "was not claimed: it is not due until")
				bunqueuetest.WorkJob(ctx, f, c, res.JobID)
				f.failed(t, fmt.Sprintf("WorkJob: bunqueue: job %d is not pending", res.JobID))
				bunqueuetest.WorkJob(ctx, f, c, enqueueOne(t, c, db, bqtOther{}, in))
				f.failed(t, `is of kind "bq_test_bqtest_other", and no worker for it was added`)
				key := &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: dbtest.Name("k"), Delay: time.Hour}
				enqueueOne(t, c, db, bqtArgs{N: 7}, key)
				bunqueuetest.Work(ctx, f, c, bqtArgs{N: 7}, key)
				f.failed(t, "has the unique key", "nothing was enqueued")
			})
		}
	})
}

// requireMovedToFailed requires the job id moved to the failed jobs with an
// error that says msg.
func requireMovedToFailed(t *testing.T, db *bun.DB, id int64, msg string) {
	t.Helper()
	f, ok := failedByJobID(t, db, id)
	require.True(t, ok, "job %d is in the failed jobs", id)
	require.True(t, strings.Contains(f.Error, msg), "failed job %d's error %q says %q", id, f.Error, msg)
}
