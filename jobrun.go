package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// jobQuery is the claim query of one jobs queue, in both modes. While a
// job is leased its run_at is the lease's end, so an expired lease makes
// it match again.
func jobQuery(queue string, d sqldialect.Dialect) QueryFunc {
	due := "run_at <= " + d.Now()
	return func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("queue = ?", queue).
			Where("state = ?", jobWaiting).
			Where(due).
			Order("priority", "run_at", "id")
	}
}

// jobRunners returns the runners of the jobs queues.
func (c *Client) jobRunners() []*runner {
	var runners []*runner
	for name, qc := range c.cfg.JobQueues {
		h, err := newHooks(fmt.Sprintf("Config.JobQueues[%q].Hooks", name), c.cfg.Hooks, qc.Hooks)
		if err != nil {
			panic(err) // validated by NewClient
		}
		if qc.Mode == ModeLease {
			l := &leaseRunner{c: c, queue: name, cfg: qc, hooks: h, jobs: jobsQueue(c, name, leaseHandler, nil)}
			runners = append(runners, &runner{
				name: name, workers: qc.Workers, batch: qc.BatchSize, selfSized: qc.selfSized, poll: qc.PollInterval,
				wake: make(chan struct{}, 1), fetch: l.jobs.candidates, run: l.run, depth: l.jobs.Count,
				explain: l.jobs.planRead,
			})
			continue
		}
		q := jobsQueue(c, name,
			func(ctx context.Context, tx bun.Tx, row *jobRow) error {
				return c.runLocked(ctx, tx, row, h)
			},
			&QueueConfig[jobRow]{
				Workers: qc.Workers, BatchSize: batchSize(qc), PollInterval: qc.PollInterval, Timeout: qc.Timeout,
				OnError: func(ctx context.Context, tx bun.Tx, row *jobRow, cause error) error {
					_, err := c.failJob(ctx, tx, row, row.Attempts+1, cause, "")
					return err
				},
			})
		q.trusted = true // completion and failure always take the row out
		q.complete = func(ctx context.Context, tx bun.Tx, prep bool, rows []*jobRow) error {
			ids := make([]int64, len(rows))
			for i, row := range rows {
				ids[i] = row.ID
			}
			if stmt, lead := c.completion(); prep && len(ids) == 1 && len(lead) == 0 {
				// One job's DELETE runs prepared, once there is one.
				text := stmt + "id IN (" + c.dialect.Placeholder(1) + ")"
				ok, err := c.prepared(ctx, tx, "DELETE", "bunqueue_jobs", text, func(ctx context.Context, st *sql.Stmt) error {
					_, err := st.ExecContext(ctx, ids[0])
					return err
				})
				if ok {
					return err
				}
			}
			return c.completeJobs(ctx, tx, ids)
		}
		q.creator = func(row *jobRow) context.Context { return c.tel.extract(row.TraceContext) }
		q.attrs = func(row *jobRow) []attribute.KeyValue {
			return []attribute.KeyValue{AttrKind.String(row.Kind), AttrAttempt.Int(row.Attempts + 1)}
		}
		q.outcomeF = func(row *jobRow, cause error) string { return failOutcome(cause, row.Attempts+1, row.MaxAttempts) }
		q.hooks = hooks{} // runLocked calls them around the worker, not its completion
		runners = append(runners, q.runner())
	}
	return runners
}

// jobsQueue returns a queue over the jobs table for the jobs queue name,
// attached to c. Its claims lock jobs by their primary key.
func jobsQueue(c *Client, name string, handler HandlerFunc[jobRow], cfg *QueueConfig[jobRow]) *Queue[jobRow] {
	q := NewQueue(name, jobQuery(name, c.dialect), handler, cfg)
	if err := q.attach(c); err != nil {
		panic(err) // the declaration is valid by construction
	}
	q.byPrimary = true
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
			return jobQuery(queue, c.dialect)(tx.NewSelect().Model((*jobRow)(nil))).Column("id")
		})
	}
}

// runLocked runs a job in lock mode, inside the claim transaction. ctx
// carries the queue's Timeout. The batch completes the jobs whose workers
// returned nil, in one statement before it commits (Queue.complete).
func (c *Client) runLocked(ctx context.Context, tx bun.Tx, row *jobRow, h hooks) error {
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

// completeJob deletes a completed job, or keeps it as completed when
// Config.Retention is set. With a lease token, only a job still leased
// with it is completed. It reports whether it changed the job.
func (c *Client) completeJob(ctx context.Context, db bun.IDB, id int64, token string) (bool, error) {
	where, args := jobWhere(id, token)
	stmt, lead := c.completion()
	return affected(db.NewRaw(stmt+where, append(lead, args...)...).Exec(ctx))
}

// completeJobs completes the jobs of ids, as completeJob does one, in one
// statement: the completion of a lock-mode batch, whose rows it holds.
func (c *Client) completeJobs(ctx context.Context, db bun.IDB, ids []int64) error {
	stmt, lead := c.completion()
	_, err := db.NewRaw(stmt+"id IN (?)", append(lead, bun.List(ids))...).Exec(ctx)
	return err
}

// completion returns the statement that completes the jobs its WHERE
// clause (to be appended) picks, and its arguments before the clause's: a
// DELETE, or with Config.Retention an UPDATE to completed.
func (c *Client) completion() (string, []any) {
	if c.cfg.Retention > 0 {
		return "UPDATE bunqueue_jobs SET state = ?, completed_at = " + c.dialect.Now() +
			", unique_key = NULL, lease_token = NULL, last_error = NULL WHERE ", []any{jobCompleted}
	}
	return "DELETE FROM bunqueue_jobs WHERE ", nil
}

// failJob records a failed attempt of a job: a snooze reschedules it
// without using the attempt; a cancel, or the last attempt, moves it to
// the failed-jobs table; anything else schedules a retry after the
// backoff. With a lease token, only a job still leased with it is
// changed, and db must be a transaction. It reports whether it changed the
// job.
func (c *Client) failJob(ctx context.Context, db bun.IDB, row *jobRow, attempt int, cause error, token string) (bool, error) {
	where, args := jobWhere(row.ID, token)
	var snooze *snoozeError
	var cancel *cancelError
	switch {
	case errors.As(cause, &snooze):
		return affected(db.NewRaw("UPDATE bunqueue_jobs SET attempts = ?, lease_token = NULL, run_at = "+c.dialect.NowPlus(snooze.after)+" WHERE "+where,
			append([]any{attempt - 1}, args...)...).Exec(ctx))
	case errors.As(cause, &cancel) || attempt >= row.MaxAttempts:
		moved, err := affected(db.NewRaw(`INSERT INTO bunqueue_failed_jobs
	(job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, error, created_at, failed_at, trace_context)
SELECT id, queue, kind, args, metadata, priority, ?, max_attempts, unique_key, ?, created_at, `+c.dialect.Now()+`, trace_context
FROM bunqueue_jobs WHERE `+where, append([]any{attempt, errorText(cause)}, args...)...).Exec(ctx))
		if err != nil || !moved {
			return false, err
		}
		return affected(db.NewRaw("DELETE FROM bunqueue_jobs WHERE id = ?", row.ID).Exec(ctx))
	default:
		wait := c.cfg.Backoff(attempt)
		return affected(db.NewRaw("UPDATE bunqueue_jobs SET attempts = ?, lease_token = NULL, last_error = ?, run_at = "+c.dialect.NowPlus(max(wait, 0))+" WHERE "+where,
			append([]any{attempt, errorText(cause)}, args...)...).Exec(ctx))
	}
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

func jobWhere(id int64, token string) (string, []any) {
	if token == "" {
		return "id = ?", []any{id}
	}
	return "id = ? AND lease_token = ?", []any{id, token}
}

func affected(r interface{ RowsAffected() (int64, error) }, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// errorText is what is kept of a job's error: its message, the stack of a
// panic, at most 60,000 bytes (a TEXT column holds 65,535).
func errorText(err error) string {
	s := err.Error()
	var pe *PanicError
	if errors.As(err, &pe) {
		s += "\n\n" + string(pe.Stack)
	}
	const limit = 60000
	if len(s) > limit {
		s = s[:limit]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// clean deletes completed jobs older than Config.Retention, in batches by
// primary key, until Stop.
func (c *Client) clean(ctx context.Context) {
	defer c.workers.Done()
	every := min(max(c.cfg.Retention/2, time.Second), time.Minute)
	log := c.cfg.Logger.With("queue", "jobs")
	for {
		t := time.NewTimer(backoff.Jitter(every, 0.1))
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		for {
			var ids []int64
			err := c.db.NewRaw("SELECT id FROM bunqueue_jobs WHERE state = ? AND completed_at < "+c.dialect.NowPlus(-c.cfg.Retention)+" ORDER BY state, completed_at, id LIMIT 1000",
				jobCompleted).Scan(ctx, &ids)
			if err == nil && len(ids) > 0 {
				_, err = c.db.NewRaw("DELETE FROM bunqueue_jobs WHERE id IN (?) AND state = ?", bun.List(ids), jobCompleted).Exec(ctx)
			}
			if err != nil {
				if ctx.Err() == nil {
					log.ErrorContext(ctx, "bunqueue: delete completed jobs", "error", err)
				}
				break
			}
			if len(ids) < 1000 {
				break
			}
		}
	}
}

// workInfo describes a job to the lifecycle hooks.
func (r *jobRow) workInfo(attempt int) *WorkInfo {
	return &WorkInfo{Queue: r.Queue, Key: fmt.Sprintf("id=%d", r.ID), JobID: r.ID, Kind: r.Kind, Attempt: attempt}
}
