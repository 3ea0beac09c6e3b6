package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/finish"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/lease"
)

// jobSQL returns the statements on the jobs tables of the client's
// server.
func (c *Client) jobSQL() jobsql.SQL { return jobsql.New(c.dialect, c.tables) }

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
		env := *c.leases
		env.Finisher = func() finish.Finisher { return c.completer(name) } // the queue's retention
		l := &lease.Runner{Queue: name, Jobs: jobsQueue(c, name, leaseHandler, claims).eng, Slots: c.newSlots(name, qc.GlobalLimit),
			Lease: qc.Lease, Timeout: qc.Timeout, KeyRatePer: qc.KeyRate.Per, Run: c.runLeased(h), Env: &env}
		return &runner{
			Queue: engine.Queue{Name: name, Settings: engine.Settings{Workers: limitedWorkers(qc.Workers, qc.GlobalLimit), Batch: qc.BatchSize, SelfSized: qc.selfSized, Poll: qc.PollInterval},
				Wake: make(chan struct{}, 1), PerKey: perKey(l.Jobs.KeyLimit), Work: l},
			slots: l.Slots, keys: l.Jobs.KeyLimit, rate: l.Jobs.Rate, keyRate: l.Jobs.KeyRate, jobs: true,
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
	q.eng.Trusted = true // completion and failure always take the row out
	q.eng.Complete = func(ctx context.Context, tx bun.Tx, prep bool, rows []*jobRow) error {
		ids := make([]int64, len(rows))
		var outputs map[int64][]byte // nil unless a worker recorded one
		var flows map[int64]int      // nil unless a job takes part in a workflow
		for i, row := range rows {
			ids[i] = row.ID
			if row.Flow != 0 {
				if flows == nil {
					flows = map[int64]int{}
				}
				flows[row.ID] = row.Flow
			}
			if row.Output != nil {
				if outputs == nil {
					outputs = map[int64][]byte{}
				}
				outputs[row.ID] = row.Output
			}
		}
		return c.completer(name).CompleteHeld(ctx, tx, prep, ids, outputs, flows)
	}
	q.eng.Creator = func(row *jobRow) context.Context { return c.tel.Extract(row.TraceContext) }
	q.eng.Attrs = func(row *jobRow) []attribute.KeyValue {
		return []attribute.KeyValue{AttrKind.String(row.Kind), AttrAttempt.Int(row.Attempts + 1)}
	}
	q.eng.Outcome = func(row *jobRow, cause error) string { return failOutcome(cause, row.Attempts+1, row.MaxAttempts) }
	q.eng.Hooks = hooks{}.around(name) // runLocked calls them around the worker, not its completion
	r := q.runner()
	r.Work = notingFates{r.Work}
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
type notingFates struct{ engine.Work }

func (e notingFates) RunBatch(ctx context.Context, s *claimconn.Session, limit int, keys []engine.Key) engine.Result {
	ctx, fates := withJobFates(ctx)
	res := e.Work.RunBatch(ctx, s, limit, keys)
	fates.attach(res.ItemErrs)
	return res
}

// jobsQueue returns a queue over the jobs table for the jobs queue name,
// attached to c. Its claims lock jobs by their primary key.
func jobsQueue(c *Client, name string, handler HandlerFunc[jobRow], cfg *QueueConfig[jobRow]) *Queue[jobRow] {
	q := NewQueue(name, c.jobSQL().ClaimQuery(name), handler, cfg)
	if err := q.attach(c); err != nil {
		panic(err) // the declaration is valid by construction
	}
	q.eng.ByPrimary = true
	q.eng.From = c.tables.Jobs
	q.eng.HeadIndex = c.jobSQL().ClaimIndex()
	q.eng.ClaimColumn = c.jobSQL().WaitColumn()
	q.eng.Claimed = func(rows []jobRow, at time.Time) {
		for i := range rows {
			rows[i].ClaimedAt = at
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

// selectJobs returns a SELECT on db over model, a *jobRow or a
// *[]jobRow, from the client's jobs table.
func (c *Client) selectJobs(db bun.IDB, model any) *bun.SelectQuery {
	return db.NewSelect().Model(model).ModelTableExpr(c.tables.Jobs + " AS ?TableAlias")
}

// jobDepth counts the jobs of a queue that are due and not locked.
func (c *Client) jobDepth(queue string) func(ctx context.Context, limit int) (int, error) {
	return func(ctx context.Context, limit int) (int, error) {
		return claim.CountUnlocked(ctx, c.db, c.dialect, queue, limit, func(tx bun.Tx) *bun.SelectQuery {
			return c.jobSQL().ClaimQuery(queue)(c.selectJobs(tx, (*jobRow)(nil))).Column("id")
		})
	}
}

// runLocked runs a job in lock mode, inside the claim transaction. ctx
// carries the queue's Timeout. The batch completes the jobs whose workers
// returned nil, in one statement before it commits (Queue.complete).
func (c *Client) runLocked(ctx context.Context, tx bun.Tx, row *jobRow, h hooks) error {
	c.startedJob(ctx, row)
	out := &jobOutput{id: row.ID}
	ctx = withRunning(withOutput(ctx, out), &runningJob{c: c, db: tx, row: row})
	run := c.kinds[row.Kind]
	row.Output = nil
	err := h.run(ctx, func() *WorkInfo { return jobWorkInfo(row, row.Attempts+1) }, func() error {
		if run == nil {
			return errNoWorker(row.Kind)
		}
		return run(ctx, tx, row, row.Attempts+1)
	})
	if err == nil {
		row.Output = out.recorded() // for the batch's completion (q.eng.Complete)
	}
	return err
}

// runLeased returns the Run of a lease-mode queue whose hooks are h: it
// runs a leased job's worker (see lease.Runner.Run).
func (c *Client) runLeased(h hooks) func(ctx context.Context, row *jobRow) ([]byte, error) {
	return func(ctx context.Context, row *jobRow) ([]byte, error) {
		out := &jobOutput{id: row.ID}
		ctx = withRunning(withOutput(ctx, out), &runningJob{c: c, db: c.db, row: row, lease: true})
		run := c.kinds[row.Kind]
		c.startedJob(ctx, row)
		err := h.run(ctx, func() *WorkInfo { return jobWorkInfo(row, row.Attempts) }, func() error {
			if run == nil {
				return errNoWorker(row.Kind)
			}
			return run(ctx, c.db, row, row.Attempts)
		})
		return out.recorded(), err
	}
}

// leaseEnv is what the lease-mode queues need of the client (see
// lease.Env).
func (c *Client) leaseEnv() *lease.Env {
	return &lease.Env{
		DB: c.db, Dialect: c.dialect, SQL: c.jobSQL(), Tel: c.tel, Logger: c.cfg.Logger,
		Retry: c.retry, Finisher: c.finisher, Fail: c.failJob, Outcome: failOutcome,
		Attrs: func(row *jobRow, attempt int) []attribute.KeyValue {
			return []attribute.KeyValue{AttrKind.String(row.Kind), AttrAttempt.Int(attempt)}
		},
		Finished: c.finishedJob, BatchTarget: BatchTarget,
		Report: func(f *lease.Failure) error {
			return &ItemError{Queue: f.Queue, Key: jobKey(f.ID), Err: f.Err, Recorded: f.Recorded,
				job: &jobFate{id: f.ID, kind: f.Kind, attempt: f.Attempt, maxAttempts: f.MaxAttempts, outcome: f.Outcome, after: f.After, stopped: f.Stopped}}
		},
	}
}

func errNoWorker(kind string) error {
	return fmt.Errorf("bunqueue: no worker for kind %q in this process: register one with AddWorker; the job is retried until MaxAttempts", kind)
}

// jobWorkInfo describes a job to the lifecycle hooks.
func jobWorkInfo(r *jobRow, attempt int) *WorkInfo {
	return &WorkInfo{Queue: r.Queue, Key: fmt.Sprintf("id=%d", r.ID), JobID: r.ID, Kind: r.Kind, Attempt: attempt}
}
