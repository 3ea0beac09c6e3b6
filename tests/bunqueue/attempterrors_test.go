package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type attemptArgs struct {
	N int `json:"n"`
}

func (attemptArgs) Kind() string { return "bq_test_attempt_errors" }

// requireAttempts checks that errs are the attempts from..to, in order,
// their times in UTC, rising, and near now; each error is want(attempt).
func requireAttempts(t *testing.T, errs bunqueue.AttemptErrors, from, to int, want func(attempt int) string) {
	t.Helper()
	require.Len(t, errs, to-from+1, "%+v", errs)
	for i, e := range errs {
		require.Equal(t, from+i, e.Attempt)
		require.Equal(t, want(e.Attempt), e.Error)
		requireUTC(t, e.At, "At")
		require.WithinDuration(t, time.Now(), e.At, time.Hour, "by the database clock")
		if i > 0 {
			require.True(t, e.At.After(errs[i-1].At), "attempt %d at %s, after %s", e.Attempt, e.At, errs[i-1].At)
		}
	}
}

// A job that fails twice (an error, then a panic), then completes, keeps
// both failures after it completed, with their numbers, errors and
// times; the panic's long message is cut to AttemptErrorBytes in its
// entry, not in LastError. Two clients on pools of their own, two workers
// each, run 12 such jobs: each job runs three times, and has two entries,
// once each.
func TestAttemptErrorsFailTwiceThenComplete(t *testing.T) {
	for name, mode := range map[string]bunqueue.JobMode{"lock": bunqueue.ModeLock, "lease": bunqueue.ModeLease} {
		t.Run(name, func(t *testing.T) {
			onServers(t, func(t *testing.T, srv dbtest.Server) {
				db := srv.Open(t, 0)
				require.NoError(t, bunqueue.Migrate(t.Context(), db))
				queue := dbtest.Name("bq_test_atterr")
				t.Cleanup(func() { deleteJobQueueRows(db, queue) })
				long := strings.Repeat("é", bunqueue.AttemptErrorBytes) // two bytes each
				var runs sync.Map                                       // job id -> *atomic.Int64
				var total atomic.Int64
				cfg := bunqueue.Config{Retention: time.Hour, Backoff: fastBackoff,
					JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2, Mode: mode, Lease: 3 * time.Second}}}
				var clients []*bunqueue.Client
				for range 2 {
					c := jobsTestClient(t, srv.Open(t, 0), cfg)
					require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[attemptArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[attemptArgs]) error {
						total.Add(1)
						n, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
						switch job.Attempt {
						case 1:
							return fmt.Errorf("boom %d", job.Args.N)
						case 2:
							panic("panic " + long)
						}
						return nil
					})))
					clients = append(clients, c)
				}
				var ids []int64
				for i := range 12 {
					ids = append(ids, enqueueOne(t, clients[0], db, attemptArgs{N: i}, &bunqueue.EnqueueOpts{Queue: queue}))
				}
				for _, c := range clients {
					start(t, c)
				}
				eventually(t, 30*time.Second, func() bool {
					page, err := clients[0].JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, States: []bunqueue.JobState{bunqueue.JobStateCompleted}})
					require.NoError(t, err)
					return len(page.Jobs) == len(ids)
				}, "every job completes")
				require.EqualValues(t, 3*len(ids), total.Load(), "three runs of each job")
				for i, id := range ids {
					n, ok := runs.Load(id)
					require.True(t, ok)
					require.EqualValues(t, 3, n.(*atomic.Int64).Load(), "job %d", id)
					rec, err := clients[1].JobGet(t.Context(), id)
					require.NoError(t, err)
					require.Equal(t, bunqueue.JobStateCompleted, rec.State)
					require.Empty(t, rec.LastError, "a completed job has no last error")
					require.Equal(t, 3, rec.Attempts, "a completed job's attempts are its runs")
					requireAttempts(t, rec.Errors, 1, 2, func(a int) string {
						if a == 1 {
							return fmt.Sprintf("boom %d", i)
						}
						return rec.Errors[1].Error
					})
					require.True(t, strings.HasPrefix(rec.Errors[1].Error, "bunqueue: handler panicked: panic é"), rec.Errors[1].Error[:60])
					cut := rec.Errors[1].Error
					require.True(t, utf8.ValidString(cut) && len(cut) <= bunqueue.AttemptErrorBytes && len(cut) > bunqueue.AttemptErrorBytes-4,
						"cut to AttemptErrorBytes at a character's boundary: %d bytes", len(cut))
				}
				page, err := clients[0].JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, Limit: 1})
				require.NoError(t, err)
				require.Len(t, page.Jobs[0].Errors, 2, "JobList reads them too")
			})
		})
	}
}

// A job of AttemptErrorsKept+2 attempts that fails every one keeps the
// newest AttemptErrorsKept, in its failed job; RetryFailed puts it back
// with them, and JobCancel between attempts adds none.
func TestAttemptErrorsKeepTheNewest(t *testing.T) {
	for name, mode := range map[string]bunqueue.JobMode{"lock": bunqueue.ModeLock, "lease": bunqueue.ModeLease} {
		t.Run(name, func(t *testing.T) { keepTheNewest(t, mode) })
	}
}

// keepTheNewest is TestAttemptErrorsKeepTheNewest in mode.
func keepTheNewest(t *testing.T, mode bunqueue.JobMode) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db, c, queue := ctlSetup(t, srv, mode)
		var runs atomic.Int64
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[ctlArgs]) error {
			runs.Add(1)
			return fmt.Errorf("fail %d", job.Attempt)
		})))
		attempts := bunqueue.AttemptErrorsKept + 2
		id := enqueueOne(t, c, db, ctlArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: attempts})
		start(t, c)
		eventually(t, 60*time.Second, func() bool { return jobState(t, c, id) == bunqueue.JobStateFailed }, "the job uses its attempts")
		require.NoError(t, c.Stop(t.Context()))
		require.EqualValues(t, attempts, runs.Load())
		want := func(a int) string { return fmt.Sprintf("fail %d", a) }
		rec, err := c.JobGet(t.Context(), id)
		require.NoError(t, err)
		requireAttempts(t, rec.Errors, 3, attempts, want)
		require.Equal(t, rec.Errors, rec.Failed.Errors)
		require.Equal(t, want(attempts), rec.Failed.Error)
		failed, err := c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{Queue: queue})
		require.NoError(t, err)
		require.Len(t, failed, 1)
		require.Equal(t, rec.Errors, failed[0].Errors, "FailedJobs reads them too")

		back, err := c.RetryFailed(t.Context(), rec.Failed.ID)
		require.NoError(t, err)
		again, err := c.JobGet(t.Context(), back)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStatePending, again.State)
		require.Equal(t, rec.Errors, again.Errors, "a failed job put back keeps its attempts")

		_, err = c.JobCancel(t.Context(), back)
		require.NoError(t, err)
		again, err = c.JobGet(t.Context(), back)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateFailed, again.State)
		require.Equal(t, rec.Errors, again.Errors, "a cancel between attempts adds none")
	})
}

// Start refuses the jobs tables of schema version 7 with the error that
// says to migrate; Migrate adds the column of version 8, a job enqueued
// before reads with no attempts, then records its failures.
func TestAttemptErrorsMigrateFromVersion7(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := emptyDB(t, srv)
		ctx := t.Context()
		require.NoError(t, bunqueue.Migrate(ctx, db))
		for _, table := range []string{"bunqueue_jobs", "bunqueue_failed_jobs"} {
			dbtest.Exec(t, db, "ALTER TABLE "+table+" DROP COLUMN attempt_errors")
		}
		dbtest.Exec(t, db, "DELETE FROM bunqueue_migrations WHERE version = 8")
		queue := dbtest.Name("bq_test_atterr_mig")
		var runs atomic.Int64
		newJobsClient := func() *bunqueue.Client {
			c := jobsTestClient(t, db, bunqueue.Config{Retention: time.Hour, Backoff: fastBackoff,
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[attemptArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[attemptArgs]) error {
				if runs.Add(1) == 1 {
					return errors.New("first")
				}
				return nil
			})))
			return c
		}
		old := newJobsClient()
		id := enqueueOne(t, old, db, attemptArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
		err := old.Start(ctx)
		require.ErrorContains(t, err, "older schema version (run bunqueue.Migrate")
		_, err = old.JobGet(ctx, id)
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated, "JobGet reads the missing column")
		require.ErrorContains(t, err, "older schema version: run bunqueue.Migrate")
		_, err = old.JobList(ctx, bunqueue.JobListFilter{Queue: queue})
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated, "JobList too")

		require.NoError(t, bunqueue.Migrate(ctx, db))
		c := newJobsClient()
		rec, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.Nil(t, rec.Errors, "a row of before reads as no attempts")
		start(t, c)
		eventually(t, 20*time.Second, func() bool { return jobState(t, c, id) == bunqueue.JobStateCompleted }, "the job completes")
		rec, err = c.JobGet(ctx, id)
		require.NoError(t, err)
		requireAttempts(t, rec.Errors, 1, 1, func(int) string { return "first" })
	})
}
