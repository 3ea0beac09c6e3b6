package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// jobFate is what became of a job whose attempt failed, for the line the
// worker logs: the job, and whether it runs again, and when.
type jobFate struct {
	id          int64
	kind        string
	attempt     int // the attempt that failed, from 1
	maxAttempts int
	// outcome is what became of the job: outcomeRetried or outcomeSnoozed
	// (it runs again after after), outcomeFailed or outcomeCancelled (it
	// moved to the failed jobs), or outcomeReleased (nothing was recorded:
	// it is still, or again, in its queue).
	outcome string
	after   time.Duration
	stopped bool // released because the client is stopping
}

// newJobFate returns the fate of row's failed attempt, not yet recorded.
func newJobFate(row *jobRow, attempt int) *jobFate {
	return &jobFate{id: row.ID, kind: row.Kind, attempt: attempt, maxAttempts: row.MaxAttempts, outcome: outcomeReleased}
}

// recorded notes that failJob recorded the attempt's failure, cause, and
// that the job runs again after after (a retry or a snooze).
func (f *jobFate) recorded(cause error, after time.Duration) {
	f.outcome = failOutcome(cause, f.attempt, f.maxAttempts)
	f.after = after
}

// jobFates collects the fates of one batch's jobs, by the key of their
// ItemError ("id=7"), for a lock-mode queue: its OnError notes them, and
// its runner hands them to the batch's ItemErrors.
type jobFates map[string]*jobFate

type jobFatesKey struct{}

// withJobFates returns ctx with an empty jobFates, which noteJobFate fills.
func withJobFates(ctx context.Context) (context.Context, jobFates) {
	m := jobFates{}
	return context.WithValue(ctx, jobFatesKey{}, m), m
}

// noteJobFate keeps f in the jobFates of ctx, if it has one.
func noteJobFate(ctx context.Context, f *jobFate) {
	if m, _ := ctx.Value(jobFatesKey{}).(jobFates); m != nil {
		m[fmt.Sprintf("id=%d", f.id)] = f
	}
}

// attach gives each *ItemError of errs the fate of its job.
func (m jobFates) attach(errs []error) {
	for _, err := range errs {
		var ie *ItemError
		if errors.As(err, &ie) && ie.job == nil {
			ie.job = m[ie.Key]
		}
	}
}

// logItemError logs err, the *ItemError of one row or job, through log
// (which names the queue), unless its level is below its queue's
// LogLevel (QueueConfig.LogLevel, JobQueueConfig.LogLevel).
func (c *Client) logItemError(ctx context.Context, log *slog.Logger, err error) {
	level, msg, attrs := itemErrorLine(err)
	if min := c.logLevel(err); min != nil && level < min.Level() {
		return
	}
	log.Log(ctx, level, msg, attrs...)
}

// logLevel returns the LogLevel of the queue of err, an *ItemError: of
// the table queue of its name, else of the jobs queue; nil for none.
func (c *Client) logLevel(err error) slog.Leveler {
	var ie *ItemError
	if !errors.As(err, &ie) {
		return nil
	}
	if ie.job == nil {
		for _, q := range c.queues {
			if l, ok := q.(interface{ logLevel() slog.Leveler }); ok && q.Name() == ie.Queue {
				return l.logLevel()
			}
		}
	}
	return c.cfg.JobQueues[ie.Queue].LogLevel
}

// logLevel returns the queue's QueueConfig.LogLevel, once added.
func (q *Queue[T]) logLevel() slog.Leveler { return q.cfg.LogLevel }

// itemErrorLine is the line of err, the *ItemError of one row or job. A
// row's failure is an error, or, if OnError recorded it on the row, an
// INFO: the app expected it and wrote what became of it. A job's says
// which job (id, kind, attempt of max attempts) and what became of it,
// with its own message and level: a retry (WARN, with retry_in), a
// snooze (INFO), a failure for good (ERROR), a release on stop (INFO), or
// a failure nothing could record (ERROR: the job stays in its queue). Its
// error is the job's error as stored (FailedJob.Error, LastError).
func itemErrorLine(err error) (slog.Level, string, []any) {
	var ie *ItemError
	if !errors.As(err, &ie) || ie.job == nil {
		level := slog.LevelError
		if ie != nil && ie.Recorded && ie.Cooldown == 0 {
			level = slog.LevelInfo // OnError recorded it on the row
		}
		return level, "bunqueue: item failed", []any{"error", err}
	}
	j := ie.job
	attrs := []any{"job_id", j.id, "kind", j.kind, "attempt", j.attempt, "max_attempts", j.maxAttempts, "outcome", j.outcome}
	level, msg := slog.LevelError, "bunqueue: job failed and nothing was recorded; it stays in its queue"
	switch {
	case j.stopped:
		level, msg = slog.LevelInfo, "bunqueue: job released on stop; it runs again"
	case !ie.Recorded || j.outcome == outcomeReleased:
		if ie.Cooldown > 0 {
			attrs = append(attrs, "cooldown", ie.Cooldown.Round(time.Millisecond)) // this process's wait
		}
	case j.outcome == outcomeRetried:
		level, msg = slog.LevelWarn, "bunqueue: job failed, will retry"
		attrs = append(attrs, "retry_in", j.after.Round(time.Millisecond))
	case j.outcome == outcomeSnoozed:
		level, msg = slog.LevelInfo, "bunqueue: job snoozed"
		attrs = append(attrs, "retry_in", j.after.Round(time.Millisecond))
	default: // outcomeFailed, outcomeCancelled
		msg = "bunqueue: job failed for good, moved to the failed jobs"
	}
	return level, msg, append(attrs, "error", ie.Err.Error())
}
