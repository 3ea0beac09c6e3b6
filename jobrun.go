package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// jobSQL returns the statements on the jobs tables of the client's
// server.
func (c *Client) jobSQL() jobsql.SQL { return jobsql.New(c.dialect) }

// jobRunners returns the runners of the jobs queues.
func (c *Client) jobRunners() []*runner {
	var runners []*runner
	for name, qc := range c.cfg.JobQueues {
		runners = append(runners, c.jobRunner(name, qc))
	}
	return runners
}

// jobRunner returns the runner of the jobs queue name, configured by qc.
func (c *Client) jobRunner(name string, qc JobQueueConfig) *runner {
	h := newHooks(c.cfg.Hooks, qc.Hooks)
	if qc.Mode == ModeLease {
		// For its claims, which leave out the full keys, and its rates.
		claims := &QueueConfig[jobRow]{KeyColumn: keyColumn(qc), KeyLimit: qc.KeyLimit, RateLimit: qc.RateLimit, KeyRate: qc.KeyRate}
		l := &leaseRunner{c: c, queue: name, cfg: qc, hooks: h, jobs: jobsQueue(c, name, leaseHandler, claims), slots: c.newSlots(name, qc.GlobalLimit)}
		return &runner{
			name: name, runSettings: runSettings{workers: limitedWorkers(qc.Workers, qc.GlobalLimit), batch: qc.BatchSize, selfSized: qc.selfSized, poll: qc.PollInterval},
			wake: make(chan struct{}, 1), slots: l.slots, keys: l.jobs.keyLimit, rate: l.jobs.rate, keyRate: l.jobs.keyRate, queueEngine: l, jobs: true,
		}
	}
	q := jobsQueue(c, name,
		func(ctx context.Context, tx bun.Tx, row *jobRow) error {
			return c.runLocked(ctx, tx, row, h)
		},
		&QueueConfig[jobRow]{
			Workers: qc.Workers, BatchSize: batchSize(qc), PollInterval: qc.PollInterval, Timeout: qc.Timeout, GlobalLimit: qc.GlobalLimit,
			KeyLimit: qc.KeyLimit, KeyColumn: keyColumn(qc), RateLimit: qc.RateLimit, KeyRate: qc.KeyRate,
			OnError: func(ctx context.Context, tx bun.Tx, row *jobRow, cause error) error {
				fate := newJobFate(row, row.Attempts+1)
				noteJobFate(ctx, fate) // for the worker's log line
				_, after, err := c.failJob(ctx, tx, row, row.Attempts+1, cause, "")
				if err == nil {
					fate.recorded(cause, after)
				}
				return err
			},
		})
	q.trusted = true // completion and failure always take the row out
	q.complete = func(ctx context.Context, tx bun.Tx, prep bool, rows []*jobRow) error {
		ids := make([]int64, len(rows))
		for i, row := range rows {
			ids[i] = row.ID
		}
		return c.completeHeld(ctx, tx, prep, ids)
	}
	q.creator = func(row *jobRow) context.Context { return c.tel.Extract(row.TraceContext) }
	q.attrs = func(row *jobRow) []attribute.KeyValue {
		return []attribute.KeyValue{AttrKind.String(row.Kind), AttrAttempt.Int(row.Attempts + 1)}
	}
	q.outcomeF = func(row *jobRow, cause error) string { return failOutcome(cause, row.Attempts+1, row.MaxAttempts) }
	q.hooks = hooks{} // runLocked calls them around the worker, not its completion
	r := q.runner()
	r.queueEngine = notingFates{r.queueEngine}
	r.jobs = true
	return r
}

// keyColumn is the jobs table's column of the keys of qc's KeyLimit and
// KeyRate, if it has one.
func keyColumn(qc JobQueueConfig) string {
	if qc.KeyLimit > 0 || qc.KeyRate.on() {
		return jobsql.LimitKeyColumn
	}
	return ""
}

// notingFates is the engine of a jobs queue in lock mode: its OnError
// notes each failed job's fate; its ItemError carries it to the worker's
// log line.
type notingFates struct{ queueEngine }

func (e notingFates) runBatch(ctx context.Context, s *session, limit int, keys []feedKey) batchResult {
	ctx, fates := withJobFates(ctx)
	res := e.queueEngine.runBatch(ctx, s, limit, keys)
	fates.attach(res.itemErrs)
	return res
}

// jobsQueue returns a queue over the jobs table for the jobs queue name,
// attached to c. Its claims lock jobs by their primary key.
func jobsQueue(c *Client, name string, handler HandlerFunc[jobRow], cfg *QueueConfig[jobRow]) *Queue[jobRow] {
	q := NewQueue(name, c.jobSQL().ClaimQuery(name), handler, cfg)
	if err := q.attach(c); err != nil {
		panic(err) // the declaration is valid by construction
	}
	q.byPrimary = true
	q.headIndex = jobsql.ClaimIndex
	q.claimColumn = c.jobSQL().WaitColumn()
	q.claimed = func(rows []jobRow, at time.Time) {
		for i := range rows {
			rows[i].claimedAt = at
		}
	}
	return q
}

// leaseHandler stands in the handler of a lease-mode queue, which only
// claims: its jobs run outside the claim transaction.
func leaseHandler(context.Context, bun.Tx, *jobRow) error {
	return errors.New("bunqueue: a lease-mode job ran in its claim transaction")
}

// batchSize is the BatchSize of a lock-mode queue's QueueConfig: zero,
// again, if the jobs queue sizes its batches itself.
func batchSize(qc JobQueueConfig) int {
	if qc.selfSized {
		return 0
	}
	return qc.BatchSize
}

// jobDepth counts the jobs of a queue that are due and not locked.
func (c *Client) jobDepth(queue string) func(ctx context.Context, limit int) (int, error) {
	return func(ctx context.Context, limit int) (int, error) {
		return c.countUnlocked(ctx, queue, limit, func(tx bun.Tx) *bun.SelectQuery {
			return c.jobSQL().ClaimQuery(queue)(tx.NewSelect().Model((*jobRow)(nil))).Column("id")
		})
	}
}

// runLocked runs a job in lock mode, inside the claim transaction. ctx
// carries the queue's Timeout. The batch completes the jobs whose workers
// returned nil, in one statement before it commits (Queue.complete).
func (c *Client) runLocked(ctx context.Context, tx bun.Tx, row *jobRow, h hooks) error {
	c.startedJob(ctx, row)
	ctx = withOutput(ctx, &jobOutput{c: c, id: row.ID, tx: tx})
	run := c.kinds[row.Kind]
	return h.run(ctx, func() *WorkInfo { return row.workInfo(row.Attempts + 1) }, func() error {
		if run == nil {
			return errNoWorker(row.Kind)
		}
		return run(ctx, tx, row, row.Attempts+1)
	})
}

func errNoWorker(kind string) error {
	return fmt.Errorf("bunqueue: no worker for kind %q in this process: register one with AddWorker; the job is retried until MaxAttempts", kind)
}

// completeJob deletes a completed job, or keeps it as completed, with
// output (nil: none recorded), when Config.Retention is set. With a lease
// token, only a job still leased with it is completed. It reports
// whether it changed the job.
func (c *Client) completeJob(ctx context.Context, db bun.IDB, id int64, token string, output []byte) (bool, error) {
	return c.jobSQL().Complete(ctx, db, c.cfg.Retention > 0, id, token, output)
}

// completeHeld completes the jobs of ids, which tx holds locked, before
// the batch commits: one job by its prepared statement (once there is
// one, with prep), several by one statement that reads them through the
// primary key (jobsql.SQL.CompleteHeld).
func (c *Client) completeHeld(ctx context.Context, tx bun.Tx, prep bool, ids []int64) error {
	if len(ids) == 1 {
		return c.completeOne(ctx, tx, prep, ids[0])
	}
	return c.jobSQL().CompleteHeld(ctx, tx, c.cfg.Retention > 0, ids)
}

// completeOne completes the job id, which tx holds locked.
func (c *Client) completeOne(ctx context.Context, tx bun.Tx, prep bool, id int64) error {
	keep := c.cfg.Retention > 0
	if prep {
		stmt := c.jobSQL().CompleteOne(keep, c.dialect.Placeholder(1))
		op, _, _ := strings.Cut(stmt, " ")
		ok, err := c.prepared(ctx, tx, op, jobsql.Jobs, stmt, func(ctx context.Context, st *sql.Stmt) error {
			_, err := st.ExecContext(ctx, id)
			return err
		})
		if ok {
			return err
		}
	}
	_, err := tx.NewRaw(c.jobSQL().CompleteOne(keep, "?"), id).Exec(ctx)
	return err
}

// failJob records a failed attempt of a job: a snooze reschedules it
// without using the attempt; a cancel, or the last attempt, moves it to
// the failed-jobs table; anything else schedules a retry after the
// backoff. With a lease token, only a job still leased with it is
// changed, and db must be a transaction. It reports whether it changed the
// job, and how long until the job runs again (the snooze or the backoff;
// zero when it moved to the failed jobs).
func (c *Client) failJob(ctx context.Context, db bun.IDB, row *jobRow, attempt int, cause error, token string) (changed bool, after time.Duration, err error) {
	var snooze *snoozeError
	var cancel *cancelError
	switch {
	case errors.As(cause, &snooze):
		changed, err = c.jobSQL().Snooze(ctx, db, row.ID, token, attempt-1, snooze.after)
		return changed, snooze.after, err
	case errors.As(cause, &cancel) || attempt >= row.MaxAttempts:
		changed, err = c.jobSQL().MoveToFailed(ctx, db, row.ID, token, attempt, errorText(cause), true)
		return changed, 0, err
	default:
		wait := c.retryWait(ctx, row, attempt)
		changed, err = c.jobSQL().ScheduleRetry(ctx, db, row.ID, token, attempt, errorText(cause), wait)
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

// workInfo describes a job to the lifecycle hooks.
func (r *jobRow) workInfo(attempt int) *WorkInfo {
	return &WorkInfo{Queue: r.Queue, Key: fmt.Sprintf("id=%d", r.ID), JobID: r.ID, Kind: r.Kind, Attempt: attempt}
}
