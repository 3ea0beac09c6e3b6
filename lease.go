package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/lease"
	"github.com/bunqueue/bunqueue/internal/limit"
)

// errLeaseExpired is the error kept for a job whose last attempt's lease
// ran out: its worker stopped without finishing it.
var errLeaseExpired = errors.New("bunqueue: the lease of the job's last attempt expired: its worker stopped (crash, kill, lost connection) without finishing it")

// leaseRunner runs one jobs queue in lease mode.
type leaseRunner struct {
	c     *Client
	jobs  *claim.Queue[jobRow] // its claims: a queue over the jobs table
	queue string
	cfg   JobQueueConfig
	hooks hooks
	slots *slots // the GlobalLimit's, nil without one (limit.go)
}

// Fetch reads the keys of the next waiting jobs (see Queue.fetch).
func (l *leaseRunner) Fetch(ctx context.Context, db bun.IDB, limit int) ([]engine.Key, error) {
	return l.jobs.Fetch(ctx, db, limit)
}

// Probe returns the idle watcher's read of one waiting job (see
// Queue.probe).
func (l *leaseRunner) Probe(db bun.IDB, except []engine.Key) *bun.SelectQuery {
	return l.jobs.Probe(db, except)
}

// Depth counts the waiting jobs, up to limit.
func (l *leaseRunner) Depth(ctx context.Context, limit int) (int, error) {
	return l.jobs.Depth(ctx, limit)
}

// Explain returns the read of fetch, for the plan check at Start.
func (l *leaseRunner) Explain() (*bun.SelectQuery, *schema.Table) { return l.jobs.Explain() }

// RunBatch leases the jobs of keys that are still waiting and not locked (with
// keys nil: up to limit jobs at the head of the queue) in a short
// transaction, then runs them one after the other outside any
// transaction, keeping their leases alive.
//
// It does not use the worker's session: a lease-mode job holds no
// connection while it runs.
func (l *leaseRunner) RunBatch(ctx context.Context, _ *session, limit int, keys []engine.Key) engine.Result {
	var res engine.Result
	var rows []jobRow
	var token string
	var claimed time.Time
	var held []heldSlot
	began := time.Now()
	err := l.c.retry(ctx, func() (err error) {
		// Taken before the claim's UPDATE sets the leases from the database
		// clock: they end no earlier than claimed + Lease.
		claimed = time.Now()
		rows, token, held, err = l.claim(ctx, limit, keys, &res)
		return err
	})
	if errors.Is(err, errLimited) {
		res.Err = err
		return res
	}
	l.c.tel.RecordClaim(ctx, l.queue, began)
	if err != nil {
		res.Err = fmt.Errorf("bunqueue: queue %q: lease: %w", l.queue, err)
		return res
	}
	res.Got = make([]string, len(rows))
	for i := range rows {
		_, res.Got[i] = l.jobs.Key(&rows[i])
	}
	if len(rows) == 0 {
		return res
	}
	if len(held) > 0 {
		defer l.freeSlots(ctx, held, token) // after the keeper stops
	}
	keeper := l.keeper(rows, token, claimed, held)
	go keeper.Run(ctx)
	defer keeper.Stop()
	done := &leaseCompletions{l: l, keeper: keeper, token: token}
	for i := range rows {
		if done.due() {
			done.flush(ctx, &res)
		}
		l.runOne(ctx, keeper, &rows[i], token, &res, done)
	}
	done.flush(ctx, &res)
	return res
}

// claim locks waiting jobs, moves those whose last attempt's lease expired
// to the failed jobs, and leases the others with a fresh token. With a
// GlobalLimit it first takes a free slot (errLimited if there is none);
// with a KeyLimit it leases only the jobs whose key has a free slot. It
// leases the slots with the jobs, and returns them. With a RateLimit it
// leases no more jobs than it found free slots of it (a *rateWait if
// none), with a KeyRate only the jobs whose key has one; it holds one per
// job leased, in the same transaction: a lease that commits has started
// its jobs.
//
// The transaction does not end with ctx: a driver that sends COMMIT under
// a context that Stop cancels (pgx does) reports an error after the server
// may have committed, and the jobs would stay leased, not run, until their
// leases ran out. The caller releases what it claimed if ctx has ended.
func (l *leaseRunner) claim(ctx context.Context, limit int, keys []engine.Key, res *engine.Result) (_ []jobRow, token string, held []heldSlot, _ error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	tx, err := l.c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, "", nil, err
	}
	defer func() { _ = tx.Rollback() }()
	if l.slots != nil {
		slot, err := l.slots.Take(ctx, tx)
		if err != nil {
			return nil, "", nil, err
		}
		held = append(held, slot)
	}
	var rated []int // the RateLimit's slots, one per job that starts
	if rate := l.jobs.Rate; rate != nil {
		if rated, err = rate.Take(ctx, tx, claim.Want(limit, keys)); err != nil {
			return nil, "", nil, err
		}
		limit, keys, res.Untried = claim.Fit(rate.Taken(rated), limit, keys)
	}
	rows, err := l.jobs.Claim(ctx, tx, l.jobs.Prepares, limit, keys) // from a worker: prepared statements serve it
	if err != nil {
		return nil, "", nil, err
	}
	res.Claimed = len(rows)
	live, expired, err := l.expire(ctx, tx, rows)
	if err != nil {
		return nil, "", nil, err
	}
	if l.jobs.KeyLimit != nil {
		var keyed []heldSlot
		if live, keyed, err = l.takeKeySlots(ctx, tx, live); err != nil {
			return nil, "", nil, err
		}
		held = append(held, keyed...)
	}
	if live, err = l.takeRateTokens(ctx, tx, live); err != nil {
		return nil, "", nil, err
	}
	token = newToken()
	if len(live) == 0 {
		held = nil // the transaction's end frees them
	} else if err := l.lease(ctx, tx, live, token, held, rated); err != nil {
		return nil, "", nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, "", nil, err
	}
	res.ItemErrs = append(res.ItemErrs, expired...)
	return live, token, held, nil
}

// expire moves the jobs of rows whose last attempt's lease expired to the
// failed jobs, and returns the others, their attempt counted, and an
// ItemError for each it moved.
func (l *leaseRunner) expire(ctx context.Context, tx bun.Tx, rows []jobRow) (live []jobRow, expired []error, _ error) {
	live = rows[:0]
	for _, r := range rows {
		if r.Attempts >= r.MaxAttempts {
			if _, _, err := l.c.failJob(ctx, tx, &r, r.Attempts, errLeaseExpired, ""); err != nil {
				return nil, nil, err
			}
			fate := newJobFate(&r, r.Attempts)
			fate.recorded(errLeaseExpired, 0)
			expired = append(expired, &ItemError{Queue: l.queue, Key: fmt.Sprintf("id=%d", r.ID), Err: errLeaseExpired, Recorded: true, job: fate})
			continue
		}
		r.Attempts++
		live = append(live, r)
	}
	return live, expired, nil
}

// lease leases the jobs of rows and the slots of held, all of which tx
// locks, to token, and holds one of the RateLimit's slots of rated per
// job for its Per.
func (l *leaseRunner) lease(ctx context.Context, tx bun.Tx, rows []jobRow, token string, held []heldSlot, rated []int) error {
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	if err := l.c.jobSQL().Lease(ctx, tx, ids, token, l.cfg.Lease); err != nil {
		return err
	}
	if err := limit.Lease(ctx, l.c.dialect, tx, held, token, l.cfg.Lease); err != nil {
		return err
	}
	if rated == nil {
		return nil
	}
	return l.jobs.Rate.Hold(ctx, tx, rated[:len(rows)], token)
}

// runOne runs one leased job and completes, fails or releases it, if the
// lease is still this worker's, and records what became of it in res
// (the time its worker ran in res.work). A job that succeeded among
// quick ones waits in done to be completed with the others.
func (l *leaseRunner) runOne(ctx context.Context, keeper *lease.Keeper, row *jobRow, token string, res *engine.Result, done *leaseCompletions) {
	j := &leasedJob{l: l, row: row, token: token, fate: newJobFate(row, row.Attempts)}
	end := j.trace(ctx)
	began := time.Now()
	gone, err := j.work(ctx, keeper)
	took := time.Since(began)
	res.Work += took
	var ierr error
	switch {
	case gone:
		ierr = j.failure(errors.New("bunqueue: the job's lease was lost before it started; another worker may hold it now"))
	case err == nil && ctx.Err() == nil && done.takes(took):
		keeper.Ran(row.ID) // its lease is kept until it is completed
		done.add(j, end)
		return
	default:
		ierr = j.settle(ctx, err, keeper.Finish(row.ID))
	}
	l.record(res, ierr, end)
}

// record ends a job's spans with ierr, its error for the batch (nil once
// it completed), counts it for Client.Stats and adds it to res.
func (l *leaseRunner) record(res *engine.Result, ierr error, end func(ierr error)) {
	end(ierr)
	l.c.finishedJob(l.queue, ierr)
	if ierr != nil {
		res.ItemErrs = append(res.ItemErrs, ierr)
	} else {
		res.Done++
	}
}

// leasedJob is one job of a lease-mode batch while runOne takes it
// through its steps: trace, work, settle.
type leasedJob struct {
	l     *leaseRunner
	row   *jobRow
	token string
	fate  *jobFate // for the worker's log line
	it    *itemSpan
	// output is what the worker recorded with RecordOutput, stored with
	// the completion.
	output jobOutput
}

// failure is err as the job's ItemError, its failure not recorded.
func (j *leasedJob) failure(err error) error {
	return &ItemError{Queue: j.l.queue, Key: j.key(), Err: err, job: j.fate}
}

func (j *leasedJob) key() string { return fmt.Sprintf("id=%d", j.row.ID) }

// trace starts the job's spans, released until settle says otherwise;
// end ends them with the job's error.
func (j *leasedJob) trace(ctx context.Context) (end func(ierr error)) {
	tel, row := j.l.c.tel, j.row
	sctx, span := tel.StartBatch(ctx, j.l.queue)
	j.it = tel.StartItem(sctx, span, j.l.queue, 1, strconv.FormatInt(row.ID, 10), tel.Extract(row.TraceContext),
		AttrKind.String(row.Kind), AttrAttempt.Int(row.Attempts))
	j.it.Outcome = outcomeReleased
	return func(ierr error) {
		if ierr != nil && j.it.Err == nil {
			j.it.Err = ierr
		}
		tel.End(j.it)
		tel.EndSpan(span, nil)
	}
}

// work runs the job's worker, with the queue's Timeout and hooks, and
// returns its result. The keeper cancels the worker's context if the
// lease is lost meanwhile. It reports gone if the lease was lost before
// the job could start. A client that is stopping starts no job: the
// result is then ctx's error, and settle gives the job back.
func (j *leasedJob) work(ctx context.Context, keeper *lease.Keeper) (gone bool, err error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	jctx, cancel := claim.WithTimeout(j.it.Ctx, j.l.cfg.Timeout)
	defer cancel()
	j.output = jobOutput{c: j.l.c, id: j.row.ID}
	jctx = withOutput(jctx, &j.output)
	row, run := j.row, j.l.c.kinds[j.row.Kind]
	if !keeper.Start(row.ID, cancel) {
		return true, nil
	}
	j.l.c.startedJob(jctx, row)
	return false, j.l.hooks.run(jctx, func() *WorkInfo { return row.workInfo(row.Attempts) }, func() error {
		if run == nil {
			return errNoWorker(row.Kind)
		}
		return run(jctx, j.l.c.db, row, row.Attempts)
	})
}

// settle records the job's result, err, while its lease is still this
// worker's: it completes the job, gives it back when the client is
// stopping, or records the failure. lost says that the keeper knew the
// lease lost. It returns the job's error for the batch: nil once the job
// completed.
func (j *leasedJob) settle(ctx context.Context, err error, lost bool) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	var changed bool
	var ferr error
	switch {
	case err == nil:
		if changed, ferr = j.complete(fctx); ferr == nil && changed {
			j.it.Outcome = outcomeCompleted
			return nil
		}
	case ctx.Err() != nil:
		// Stopping: give the job back at once, without using the attempt.
		if changed, ferr = j.release(fctx); ferr == nil && changed {
			j.fate.stopped = true
			return j.failure(fmt.Errorf("bunqueue: released on stop: %w", ctx.Err()))
		}
	default:
		var after time.Duration
		if changed, after, ferr = j.fail(fctx, err); ferr == nil && changed {
			j.it.Outcome, j.it.Err = failOutcome(err, j.row.Attempts, j.row.MaxAttempts), err
			j.fate.recorded(err, after)
			return &ItemError{Queue: j.l.queue, Key: j.key(), Err: err, Recorded: true, job: j.fate}
		}
	}
	if ferr != nil {
		return j.failure(fmt.Errorf("bunqueue: finishing the job failed (its lease will expire and it will run again): %w (job result: %v)", ferr, err))
	}
	return j.leaseGone(lost, err)
}

// leaseGone is the failure of a job whose result, err, was not recorded
// because its lease was no longer this worker's: lost (the keeper knew
// it lost) or expired.
func (j *leasedJob) leaseGone(lost bool, err error) error {
	why := "the lease expired"
	if lost {
		why = "the lease was lost"
	}
	return j.failure(fmt.Errorf("bunqueue: %s before the job finished; another worker may hold it, so this result was not recorded (job result: %v)", why, err))
}

// complete completes the job. It reports whether it did: not if the
// lease was no longer this worker's.
func (j *leasedJob) complete(ctx context.Context) (changed bool, err error) {
	err = j.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		changed, err = j.l.c.finisher().CompleteLease(ctx, tx, j.row.ID, j.token, j.output.recorded())
		return err
	})
	return changed, err
}

// release gives the job back to its queue at once, without using the
// attempt. It reports whether it did: not if the lease was no longer
// this worker's.
func (j *leasedJob) release(ctx context.Context) (changed bool, err error) {
	err = j.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		changed, err = j.l.c.finisher().Release(ctx, tx, j.row.ID, j.token)
		return err
	})
	return changed, err
}

// fail records the job's failure, cause (see Client.failJob). It reports
// whether it did, and how long until the job runs again.
func (j *leasedJob) fail(ctx context.Context, cause error) (changed bool, after time.Duration, err error) {
	err = j.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		changed, after, err = j.l.c.failJob(ctx, tx, j.row, j.row.Attempts, cause, j.token)
		return err
	})
	return changed, after, err
}

// inTx runs fn in a transaction of its own, at READ COMMITTED, retrying
// conflicts: how every change of a leased job's state is written.
func (j *leasedJob) inTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	return j.l.c.retry(ctx, func() error {
		return j.l.c.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, fn)
	})
}

// keeper returns the keeper of the leases of rows, leased with token by a
// statement sent at claimed, and of the slots held with them.
func (l *leaseRunner) keeper(rows []jobRow, token string, claimed time.Time, held []heldSlot) *lease.Keeper {
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	extend := func(ctx context.Context, ids []int64) ([]int64, error) {
		db, jobs := l.c.db, l.c.jobSQL()
		still := ids
		n, err := jobs.Extend(ctx, db, ids, token, l.cfg.Lease)
		if err == nil && n < int64(len(ids)) {
			// Some lease was taken over: find which.
			still, err = jobs.Leased(ctx, db, ids, token)
		}
		if err == nil && len(held) > 0 {
			var kept bool
			if kept, err = l.extendSlots(ctx, held, token); err == nil && !kept {
				still = nil // a slot ran out and was taken: no job may run on under it
			}
		}
		return still, err
	}
	warn := func(ctx context.Context, err error) {
		l.c.cfg.Logger.WarnContext(ctx, "bunqueue: lease heartbeat failed", "queue", l.queue, "error", err)
	}
	return lease.New(ids, l.cfg.Lease, claimed, extend, warn)
}

// heldSlot is a slot that a lease-mode batch leased with its jobs.
type heldSlot = limit.Held

// extendSlots pushes the end of the leases of held to Lease from now,
// and reports whether token still held every one.
func (l *leaseRunner) extendSlots(ctx context.Context, held []heldSlot, token string) (bool, error) {
	return limit.Extend(ctx, l.c.dialect, l.c.db, held, token, l.cfg.Lease)
}

// freeSlots gives back the slots that a batch leased with its jobs, once
// they all ended. A slot it fails to free is free when its lease runs out.
func (l *leaseRunner) freeSlots(ctx context.Context, held []heldSlot, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	for _, h := range held {
		if err := limit.Free(ctx, l.c.dialect, l.c.db, h, token); err != nil {
			l.c.cfg.Logger.WarnContext(ctx, "bunqueue: freeing a slot of a limit failed; it is free when its lease runs out", "queue", l.queue, "error", err)
		} else if l.jobs.KeyLimit != nil {
			l.jobs.KeyLimit.Freed([]string{h.Limit.Key})
		}
	}
}

// newToken names a lease-mode batch: its jobs' leases and the slots
// leased with them (see limit.NewToken).
func newToken() string { return limit.NewToken() }
