package lease

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/uptrace/bun"
)

// leasedJob is one job of a lease-mode batch while runOne takes it
// through its steps: trace, work, settle.
type leasedJob struct {
	l     *Runner
	row   *jobsql.Row
	token string
	fate  Failure // for the worker's log line
	it    *telemetry.Item
	// output is what the worker recorded with RecordOutput, stored with
	// the completion.
	output []byte
}

// failure is err as the job's failure, not recorded (see Env.Report).
func (j *leasedJob) failure(err error) error {
	f := j.fate
	f.Err = err
	return j.l.Env.Report(&f)
}

// trace starts the job's spans, released until settle says otherwise;
// end ends them with the job's error.
func (j *leasedJob) trace(ctx context.Context) (end func(ierr error)) {
	tel, row := j.l.Env.Tel, j.row
	sctx, span := tel.StartBatch(ctx, j.l.Queue)
	j.it = tel.StartItem(sctx, span, j.l.Queue, 1, strconv.FormatInt(row.ID, 10), tel.Extract(row.TraceContext),
		j.l.Env.Attrs(row, row.Attempts)...)
	j.it.Outcome = telemetry.OutcomeReleased
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
func (j *leasedJob) work(ctx context.Context, keeper *Keeper) (gone bool, err error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	jctx, cancel := claim.WithTimeout(j.it.Ctx, j.l.Timeout)
	defer cancel()
	if !keeper.Start(j.row.ID, cancel) {
		return true, nil
	}
	j.output, err = j.l.Run(jctx, j.row)
	return false, err
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
			j.it.Outcome = telemetry.OutcomeCompleted
			return nil
		}
	case ctx.Err() != nil:
		// Stopping: give the job back at once, without using the attempt.
		if changed, ferr = j.release(fctx); ferr == nil && changed {
			j.fate.Stopped = true
			return j.failure(fmt.Errorf("bunqueue: released on stop: %w", ctx.Err()))
		}
	default:
		var after time.Duration
		if changed, after, ferr = j.fail(fctx, err); ferr == nil && changed {
			j.it.Outcome, j.it.Err = j.l.Env.Outcome(err, j.row.Attempts, j.row.MaxAttempts), err
			f := j.fate
			f.Err, f.Recorded, f.Outcome, f.After = err, true, j.it.Outcome, after
			return j.l.Env.Report(&f)
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
		changed, err = j.l.Env.Finisher().CompleteLease(ctx, tx, j.row.ID, j.token, j.output, j.row.Flow)
		return err
	})
	return changed, err
}

// release gives the job back to its queue at once, without using the
// attempt. It reports whether it did: not if the lease was no longer
// this worker's.
func (j *leasedJob) release(ctx context.Context) (changed bool, err error) {
	err = j.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		changed, err = j.l.Env.Finisher().Release(ctx, tx, j.row.ID, j.token)
		return err
	})
	return changed, err
}

// fail records the job's failure, cause (see Client.failJob). It reports
// whether it did, and how long until the job runs again.
func (j *leasedJob) fail(ctx context.Context, cause error) (changed bool, after time.Duration, err error) {
	err = j.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		changed, after, err = j.l.Env.Fail(ctx, tx, j.row, j.row.Attempts, cause, j.token)
		return err
	})
	return changed, after, err
}

// inTx runs fn in a transaction of its own, at READ COMMITTED, retrying
// conflicts: how every change of a leased job's state is written.
func (j *leasedJob) inTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	return j.l.Env.Retry(ctx, func() error {
		return j.l.Env.DB.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, fn)
	})
}
