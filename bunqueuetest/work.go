package bunqueuetest

import (
	"context"
	"testing"
	"time"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/testbridge"
)

// Outcome is what became of a job that Work or WorkJob ran.
type Outcome string

const (
	// Completed: the worker returned nil and the job completed (it was
	// deleted, or kept as completed for its queue's retention or its
	// output's).
	Completed Outcome = "completed"
	// Retried: the worker failed and the job waits for a retry, after
	// the backoff (WorkResult.RetryIn).
	Retried Outcome = "retried"
	// Snoozed: the worker returned bunqueue.Snooze and the job waits
	// WorkResult.RetryIn, without using the attempt.
	Snoozed Outcome = "snoozed"
	// Failed: the worker failed its last attempt, and the job moved to
	// the failed jobs.
	Failed Outcome = "failed"
	// Cancelled: the worker returned bunqueue.Cancel, and the job moved
	// to the failed jobs.
	Cancelled Outcome = "cancelled"
)

// WorkResult is what became of a job that Work or WorkJob ran.
type WorkResult struct {
	// JobID is the job's id.
	JobID int64
	// Outcome is what became of it.
	Outcome Outcome
	// Err is what the worker returned (a panic is a *bunqueue.PanicError),
	// nil when it completed.
	Err error
	// RetryIn is how long until the job runs again, when it was Retried or
	// Snoozed.
	RetryIn time.Duration
	// Attempt is the attempt that ran, from 1.
	Attempt int
}

// Work enqueues a job with args and opts through client, as
// client.Enqueue does on the client's database, and runs it at once with
// WorkJob. A job whose unique key is pending is not enqueued, and fails
// the test: WorkJob runs the pending one. The queue (opts.Queue) must be
// one of the client's, and the job due now: one that RunAt or Delay
// schedules later is not claimed, and fails the test.
func Work(ctx context.Context, t testing.TB, client *bunqueue.Client, args bunqueue.JobArgs, opts *bunqueue.EnqueueOpts) *WorkResult {
	t.Helper()
	if client == nil {
		t.Fatalf("bunqueuetest: Work: the client must not be nil")
		return nil
	}
	res, err := client.Enqueue(ctx, testbridge.DB(client), args, opts)
	switch {
	case err != nil:
		t.Fatalf("bunqueuetest: Work: %v", err)
		return nil
	case res.Duplicate:
		t.Fatalf("bunqueuetest: Work: job %d, pending, has the unique key %q: nothing was enqueued (WorkJob(%d) runs the pending job)", res.ID, opts.UniqueKey, res.ID)
		return nil
	}
	return workJob(ctx, t, "Work", client, res.ID)
}

// WorkJob runs the pending job id in the calling goroutine, through the
// path that the client's workers take: it claims the job in its queue's
// mode and runs the worker that bunqueue.AddWorker added for its kind
// (in lock mode inside the claim transaction, so that the worker's writes
// commit with the job's completion, or are undone with its failure),
// with the queue's hooks and Timeout, holding a slot of its GlobalLimit
// if it has one; then it completes the job, or records its failure (a
// retry after the backoff, a snooze, a move to the failed jobs) as a
// worker does. What the worker did is the WorkResult.
//
// The client need not be started, and is better not: a started client's
// workers may take the job first. WorkJob fails the test with t.Fatalf
// if the job could not run: it is not pending, not due (scheduled
// later), held by another worker, in a queue whose GlobalLimit slots are
// all held, in a queue the client does not run, or of a kind it has no
// worker for; or if its outcome could not be recorded.
func WorkJob(ctx context.Context, t testing.TB, client *bunqueue.Client, id int64) *WorkResult {
	t.Helper()
	return workJob(ctx, t, "WorkJob", client, id)
}

func workJob(ctx context.Context, t testing.TB, fn string, client *bunqueue.Client, id int64) *WorkResult {
	t.Helper()
	if client == nil {
		t.Fatalf("bunqueuetest: %s: the client must not be nil", fn)
		return nil
	}
	r, err := testbridge.WorkJob(ctx, client, id)
	if err != nil {
		t.Fatalf("bunqueuetest: %s: %v", fn, err)
		return nil
	}
	return &WorkResult{JobID: id, Outcome: Outcome(r.Outcome), Err: r.Err, RetryIn: r.RetryIn, Attempt: r.Attempt}
}
