package bunqueue

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/finish"
	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// How a job's attempt ends: the decision of what a failure means
// (failJob), and the finisher that writes every change of a job's state.

// finisher is the one road by which jobs change state (internal/finish):
// the workers of both modes, job control, RetryFailed and retention all
// write through it, in a transaction. The workers complete jobs through
// the finisher of their queue (completer).
func (c *Client) finisher() finish.Finisher {
	return finish.New(c.jobSQL(), false, c.prepared)
}

// completer is the finisher that completes the jobs of the jobs queue
// named queue: it keeps them as completed for the queue's Retention, or
// deletes them where that is zero; it keeps one that recorded an output
// either way.
func (c *Client) completer(queue string) finish.Finisher {
	return finish.New(c.jobSQL(), c.cfg.JobQueues[queue].Retention > 0, c.prepared)
}

// failJob records a failed attempt of a job: a snooze reschedules it
// without using the attempt; a cancel, or the last attempt, moves it to
// the failed-jobs table; anything else schedules a retry after the
// backoff. With a lease token, only a job still leased with it is
// changed. It reports whether it changed the job, and how long until the
// job runs again (the snooze or the backoff; zero when it moved to the
// failed jobs).
func (c *Client) failJob(ctx context.Context, tx bun.Tx, row *jobRow, attempt int, cause error, token string) (changed bool, after time.Duration, err error) {
	var snooze *snoozeError
	var cancel *cancelError
	switch {
	case errors.As(cause, &snooze):
		changed, err = c.finisher().Snooze(ctx, tx, row.ID, token, attempt-1, snooze.after)
		return changed, snooze.after, err
	case errors.As(cause, &cancel) || attempt >= row.MaxAttempts:
		changed, err = c.finisher().Fail(ctx, tx, row.ID, token, attempt, errorText(cause), true, row.Flow)
		return changed, 0, err
	default:
		wait := c.retryWait(ctx, row, attempt)
		changed, err = c.finisher().Retry(ctx, tx, row.ID, token, attempt, errorText(cause), wait)
		return changed, wait, err
	}
}

// retryWait is how long the job of row waits after its failed attempt,
// by Config.Backoff. A Backoff that panics (or calls runtime.Goexit) is
// logged, and the job waits DefaultBackoff's time instead: the attempt
// is still recorded and the job retried.
func (c *Client) retryWait(ctx context.Context, row *jobRow, attempt int) time.Duration {
	var wait time.Duration
	if err := contain(ctx, func() error { wait = c.cfg.Backoff(attempt); return nil }); err != nil {
		wait = DefaultBackoff(attempt)
		c.cfg.Logger.ErrorContext(ctx, "bunqueue: Config.Backoff failed; the job waits DefaultBackoff's time instead",
			"queue", row.Queue, "job_id", row.ID, "attempt", attempt, "error", err)
	}
	return max(wait, 0)
}

// failOutcome is what failJob does with a failed attempt.
func failOutcome(cause error, attempt, maxAttempts int) string {
	var snooze *snoozeError
	var cancel *cancelError
	switch {
	case errors.As(cause, &snooze):
		return outcomeSnoozed
	case errors.As(cause, &cancel):
		return outcomeCancelled
	case attempt >= maxAttempts:
		return outcomeFailed
	}
	return outcomeRetried
}

// errorText is what is kept of a job's error: its message, the stack of a
// panic, at most 60,000 bytes (a TEXT column holds 65,535). PostgreSQL's
// text holds neither a NUL nor invalid UTF-8, and a failure that could
// not be recorded would never count its attempt: a NUL is kept as the
// four characters \x00, invalid bytes as U+FFFD.
func errorText(err error) string {
	s := err.Error()
	var pe *PanicError
	if errors.As(err, &pe) {
		s += "\n\n" + string(pe.Stack)
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	return jobsql.CutText(s, 60000)
}
