package bunqueue_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type ctlArgs struct {
	N int `json:"n"`
}

func (ctlArgs) Kind() string { return "bq_test_jobctl" }

type ctlOtherArgs struct{}

func (ctlOtherArgs) Kind() string { return "bq_test_jobctl_other" }

// ctlSetup is a migrated database on srv with a queue of the test's own
// and a client that knows it (not started).
func ctlSetup(t *testing.T, srv dbtest.Server, mode bunqueue.JobMode) (*bun.DB, *bunqueue.Client, string) {
	t.Helper()
	db := srv.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("bq_test_jobctl")
	t.Cleanup(func() { deleteJobQueueRows(db, queue) })
	c := jobsTestClient(t, db, bunqueue.Config{
		Retention: time.Hour, Backoff: fastBackoff,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2, Mode: mode, Lease: 3 * time.Second}},
	})
	return db, c, queue
}

// jobState reads the job's state with JobGet.
func jobState(t *testing.T, c *bunqueue.Client, id int64) bunqueue.JobState {
	t.Helper()
	rec, err := c.JobGet(t.Context(), id)
	require.NoError(t, err)
	return rec.State
}

// Each call of the job control API, on each state: JobGet's record,
// JobCancel, JobDelete and JobRunNow, their errors.
func TestJobControlCalls(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db, c, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		ctx := t.Context()
		opts := func(o bunqueue.EnqueueOpts) *bunqueue.EnqueueOpts { o.Queue = queue; return &o }
		pending := enqueueOne(t, c, db, ctlArgs{N: 1}, opts(bunqueue.EnqueueOpts{Priority: 3, Metadata: map[string]string{"a": "b"}, UniqueKey: dbtest.Name("k")}))
		scheduled := enqueueOne(t, c, db, ctlArgs{N: 2}, opts(bunqueue.EnqueueOpts{Delay: time.Hour}))
		retrying := enqueueOne(t, c, db, ctlArgs{N: 3}, opts(bunqueue.EnqueueOpts{Delay: time.Hour}))
		dbtest.Exec(t, db, "UPDATE bunqueue_jobs SET attempts = 1, last_error = 'boom' WHERE id = "+itoa(int(retrying)))
		running := enqueueOne(t, c, db, ctlOtherArgs{}, opts(bunqueue.EnqueueOpts{}))
		dbtest.Exec(t, db, "UPDATE bunqueue_jobs SET attempts = 1, lease_token = 'x', run_at = "+plusSQL(db, time.Hour)+" WHERE id = "+itoa(int(running)))
		completed := enqueueOne(t, c, db, ctlArgs{N: 5}, opts(bunqueue.EnqueueOpts{}))
		dbtest.Exec(t, db, "UPDATE bunqueue_jobs SET state = 1, attempts = 1, completed_at = "+nowSQL(db)+", output = '{\"ok\":true}' WHERE id = "+itoa(int(completed)))

		page, err := c.JobList(ctx, bunqueue.JobListFilter{Queue: queue, States: []bunqueue.JobState{bunqueue.JobStateScheduled, bunqueue.JobStateCompleted}})
		require.NoError(t, err)
		require.Equal(t, []int64{completed, scheduled}, recIDs(page.Jobs), "the waiting states' conditions do not apply to the completed jobs")
		require.Empty(t, page.Cursor)

		rec, err := c.JobGet(ctx, pending)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStatePending, rec.State)
		require.Equal(t, queue, rec.Queue)
		require.Equal(t, "bq_test_jobctl", rec.Kind)
		require.JSONEq(t, `{"n":1}`, string(rec.Args))
		require.Equal(t, map[string]string{"a": "b"}, rec.Metadata)
		require.Equal(t, 3, rec.Priority)
		require.Equal(t, bunqueue.MaxAttemptsDefault, rec.MaxAttempts)
		require.NotNil(t, rec.UniqueKey)
		requireUTC(t, rec.CreatedAt, "CreatedAt")
		require.Nil(t, rec.Failed)
		for id, want := range map[int64]bunqueue.JobState{scheduled: bunqueue.JobStateScheduled, retrying: bunqueue.JobStateRetrying,
			running: bunqueue.JobStateRunning, completed: bunqueue.JobStateCompleted} {
			require.Equal(t, want, jobState(t, c, id), "job %d", id)
		}
		rec, err = c.JobGet(ctx, completed)
		require.NoError(t, err)
		require.JSONEq(t, `{"ok":true}`, string(rec.Output))
		require.NotNil(t, rec.CompletedAt)

		_, err = c.JobGet(ctx, 1<<62)
		require.ErrorIs(t, err, bunqueue.ErrJobNotFound)
		require.ErrorContains(t, err, "job 4611686018427387904")

		// Run now: a scheduled or retrying job becomes due; running,
		// completed are refused.
		require.NoError(t, c.JobRunNow(ctx, scheduled))
		require.Equal(t, bunqueue.JobStatePending, jobState(t, c, scheduled))
		require.NoError(t, c.JobRunNow(ctx, retrying))
		rec, err = c.JobGet(ctx, retrying)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateRetrying, rec.State)
		require.Equal(t, "boom", rec.LastError)
		require.False(t, rec.RunAt.After(time.Now().Add(time.Minute)), "due now: %s", rec.RunAt)
		require.ErrorIs(t, c.JobRunNow(ctx, running), bunqueue.ErrJobRunning)
		require.ErrorIs(t, c.JobRunNow(ctx, completed), bunqueue.ErrJobFinished)
		require.ErrorIs(t, c.JobRunNow(ctx, 1<<62), bunqueue.ErrJobNotFound)

		// Cancel: the job moves to the failed jobs, where JobGet finds it.
		was, err := c.JobCancel(ctx, pending)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStatePending, was)
		rec, err = c.JobGet(ctx, pending)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateFailed, rec.State)
		require.Equal(t, pending, rec.ID)
		require.NotNil(t, rec.Failed)
		require.Equal(t, pending, rec.Failed.JobID)
		require.Contains(t, rec.LastError, "cancelled with JobCancel")
		require.JSONEq(t, `{"n":1}`, string(rec.Args))
		_, err = c.JobCancel(ctx, pending)
		require.ErrorIs(t, err, bunqueue.ErrJobFinished, "cancelled already")
		require.ErrorIs(t, c.JobRunNow(ctx, pending), bunqueue.ErrJobFinished)
		_, err = c.JobCancel(ctx, completed)
		require.ErrorIs(t, err, bunqueue.ErrJobFinished)
		was, err = c.JobCancel(ctx, running)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateRunning, was)
		_, err = c.JobCancel(ctx, 1<<62)
		require.ErrorIs(t, err, bunqueue.ErrJobNotFound)

		// Delete: waiting, completed and failed jobs go for good.
		for _, id := range []int64{pending, scheduled, completed} {
			require.NoError(t, c.JobDelete(ctx, id))
			_, err = c.JobGet(ctx, id)
			require.ErrorIs(t, err, bunqueue.ErrJobNotFound, "job %d", id)
			require.ErrorIs(t, c.JobDelete(ctx, id), bunqueue.ErrJobNotFound)
		}

		// The Tx variants: rolled back, nothing happened.
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = c.JobCancelTx(ctx, tx, retrying)
		require.NoError(t, err)
		rec, err = c.JobGetTx(ctx, tx, retrying)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateFailed, rec.State, "cancelled in the transaction")
		require.NoError(t, tx.Rollback())
		require.Equal(t, bunqueue.JobStateRetrying, jobState(t, c, retrying))
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return c.JobDeleteTx(ctx, tx, retrying) }))
		_, err = c.JobGet(ctx, retrying)
		require.ErrorIs(t, err, bunqueue.ErrJobNotFound)
	})
}

// A job that a lock-mode worker holds: JobCancel, JobDelete and
// JobRunNow change nothing and say it runs; once the worker's transaction
// ends, JobCancel reports what became of the job. On SQLite JobCancel
// waits for that transaction.
func TestJobControlLockMode(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db, c, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		ctx := t.Context()
		id := enqueueOne(t, c, db, ctlArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
		started, release := make(chan struct{}), make(chan struct{})
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ctlArgs]) error {
			close(started)
			<-release
			return nil
		})))
		start(t, c)
		<-started
		if srv.Name == "sqlite" {
			// No row locks: JobCancel waits for the worker's transaction
			// (the database's write lock), then finds the job completed.
			var released atomic.Bool
			go func() {
				time.Sleep(200 * time.Millisecond)
				released.Store(true)
				close(release)
			}()
			_, err := c.JobCancel(ctx, id)
			require.ErrorIs(t, err, bunqueue.ErrJobFinished)
			require.True(t, released.Load(), "JobCancel returned after the worker's transaction ended")
			return
		}
		_, err := c.JobCancel(ctx, id)
		require.ErrorIs(t, err, bunqueue.ErrJobRunning)
		require.ErrorIs(t, c.JobDelete(ctx, id), bunqueue.ErrJobRunning)
		require.ErrorIs(t, c.JobRunNow(ctx, id), bunqueue.ErrJobRunning)
		close(release)
		eventually(t, 10*time.Second, func() bool {
			rec, err := c.JobGet(ctx, id)
			require.NoError(t, err)
			return rec.State == bunqueue.JobStateCompleted
		}, "the job completes as its worker said")
		_, err = c.JobCancel(ctx, id)
		require.ErrorIs(t, err, bunqueue.ErrJobFinished)
	})
}

// A running lease-mode job that JobCancel cancels: its context is
// cancelled at its next heartbeat, and it ends in the failed jobs as
// cancelled, its result not recorded.
func TestJobControlLeaseCancel(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db, c, queue := ctlSetup(t, srv, bunqueue.ModeLease)
		ctx := t.Context()
		id := enqueueOne(t, c, db, ctlArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
		started, ended := make(chan struct{}), make(chan error, 1)
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ctlArgs]) error {
			close(started)
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
			case <-time.After(20 * time.Second):
				ended <- errors.New("not cancelled")
			}
			return ctx.Err()
		})))
		start(t, c)
		<-started
		require.Equal(t, bunqueue.JobStateRunning, jobState(t, c, id))
		was, err := c.JobCancel(ctx, id)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateRunning, was)
		require.ErrorIs(t, <-ended, context.Canceled, "cancelled at the next heartbeat (Lease/3)")
		rec, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateFailed, rec.State)
		require.Contains(t, rec.LastError, "cancelled with JobCancel")
	})
}

// Bad filters name their field and wrap ErrInvalidFilter.
func TestJobListBadFilter(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	c := jobsTestClient(t, db, bunqueue.Config{})
	for field, f := range map[string]bunqueue.JobListFilter{
		"JobListFilter.Limit":         {Limit: 1001},
		"JobListFilter.States[1]":     {States: []bunqueue.JobState{bunqueue.JobStatePending, "done"}},
		"JobListFilter.Cursor":        {Cursor: "nope"},
		"JobListFilter.Queue":         {Queue: "a\x00b"},
		"JobListFilter.CreatedBefore": {CreatedFrom: time.Now(), CreatedBefore: time.Now().Add(-time.Hour)},
		"JobListFilter.CreatedFrom":   {CreatedFrom: time.Date(99, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := c.JobList(t.Context(), f)
		require.ErrorIs(t, err, bunqueue.ErrInvalidFilter, field)
		require.ErrorContains(t, err, field)
	}
}

// RecordOutput in both modes: stored with the completion, read by
// JobGet; an attempt that fails keeps none; past MaxOutputBytes, an
// error; outside a worker, an error.
func TestJobOutput(t *testing.T) {
	require.ErrorIs(t, bunqueue.RecordOutput(context.Background(), 1), bunqueue.ErrNotInWorker)
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				db, c, queue := ctlSetup(t, srv, mode)
				tooLarge := make(chan error, 1)
				require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ctlArgs]) error {
					if err := bunqueue.RecordOutput(ctx, map[string]any{"n": job.Args.N, "attempt": job.Attempt}); err != nil {
						return err
					}
					switch job.Args.N {
					case 2:
						tooLarge <- bunqueue.RecordOutput(ctx, strings.Repeat("x", bunqueue.MaxOutputBytes))
					case 3:
						if job.Attempt == 1 {
							return errors.New("first attempt fails (test)")
						}
						return bunqueue.RecordOutput(ctx, "second")
					}
					return nil
				})))
				var ids []int64
				for n := 1; n <= 3; n++ {
					ids = append(ids, enqueueOne(t, c, db, ctlArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue}))
				}
				start(t, c)
				for _, id := range ids {
					eventually(t, 20*time.Second, func() bool { return jobState(t, c, id) == bunqueue.JobStateCompleted }, "job %d completes", id)
				}
				err := <-tooLarge
				require.ErrorIs(t, err, bunqueue.ErrOutputTooLarge)
				require.ErrorContains(t, err, "MaxOutputBytes")
				for i, want := range []string{`{"attempt":1,"n":1}`, `{"attempt":1,"n":2}`, `"second"`} {
					rec, err := c.JobGet(t.Context(), ids[i])
					require.NoError(t, err)
					require.JSONEq(t, want, string(rec.Output), "job %d", ids[i])
				}
			})
		}
	})
}
