package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// heldTries and heldWait bound how long a job action waits for a job that
// another transaction holds locked: a lease-mode claim holds it for the
// moment of its short transaction, after which it reads as running; a
// lock-mode worker holds it for the whole job, and the action gives up
// with ErrJobRunning rather than wait for the job to end.
const (
	heldTries = 8
	heldWait  = 30 * time.Millisecond
)

// JobCancel cancels the job id: it moves the job, as it is, to the failed
// jobs, with the error "bunqueue: cancelled with JobCancel", where
// JobGet, JobList, FailedJobs and the CLI show it, and from where
// RetryFailed puts it back. A cancelled job is kept, as River keeps it in
// its cancelled state: an operator can see what was cancelled, and undo
// it; JobDelete removes it for good.
//
// It returns the state the job was in. A pending, scheduled or retrying
// job never runs after JobCancel returned. A running lease-mode job
// (JobStateRunning) runs on until its worker's next heartbeat, a third of
// the queue's Lease at most, which finds its lease gone and cancels the
// job's context; its result is not recorded. A job that a lock-mode
// worker runs is locked by its claim transaction: JobCancel changes
// nothing and returns an error that wraps ErrJobRunning at once (after a
// few tries over a fraction of a second), and the job ends as its worker
// says. On SQLite, which has no row locks, JobCancel waits for the
// running job's transaction (the database's write lock, up to the pool's
// busy_timeout) instead, then cancels the job if it is to run again, or
// reports that it finished. A
// job that completed or failed is an error that wraps ErrJobFinished; an
// unknown id, ErrJobNotFound.
func (c *Client) JobCancel(ctx context.Context, id int64) (JobState, error) {
	var was JobState
	err := c.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		was, err = c.JobCancelTx(ctx, tx, id)
		return err
	})
	return was, err
}

// JobCancelTx is JobCancel through db: in a transaction of the app's, the
// job is cancelled if and only if that transaction commits, and it stays
// locked until then, so no worker claims it meanwhile.
func (c *Client) JobCancelTx(ctx context.Context, db bun.IDB, id int64) (JobState, error) {
	var was JobState
	err := c.jobAction(ctx, db, "cancel", id, func(ctx context.Context, tx bun.Tx, row *controlRow) error {
		if row == nil {
			return c.notWaiting(ctx, tx, id)
		}
		if was = row.jobState(); was == JobStateCompleted {
			return fmt.Errorf("%w: it completed", ErrJobFinished)
		}
		if err := row.inSequence(); err != nil {
			return err
		}
		_, err := c.finisher().Fail(ctx, tx, id, "", row.Attempts, cancelledText, false, row.Flow)
		return err
	})
	if err != nil {
		return "", err
	}
	return was, nil
}

// JobDelete deletes the job id for good, whatever its state but running:
// a waiting or completed job from the jobs table, a failed or cancelled
// one from the failed jobs. A running job is an error that wraps
// ErrJobRunning (JobCancel a running lease-mode job first); an unknown id,
// ErrJobNotFound.
func (c *Client) JobDelete(ctx context.Context, id int64) error {
	return c.inTx(ctx, func(ctx context.Context, tx bun.Tx) error { return c.JobDeleteTx(ctx, tx, id) })
}

// JobDeleteTx is JobDelete through db: in a transaction of the app's, the
// job is gone if and only if that transaction commits.
func (c *Client) JobDeleteTx(ctx context.Context, db bun.IDB, id int64) error {
	return c.jobAction(ctx, db, "delete", id, func(ctx context.Context, tx bun.Tx, row *controlRow) error {
		if row == nil {
			gone, err := c.finisher().DeleteFailed(ctx, tx, id, true)
			if err == nil && !gone {
				err = ErrJobNotFound
			}
			return err
		}
		if row.jobState() == JobStateRunning {
			return fmt.Errorf("%w: a lease-mode worker holds it; cancel it first (JobCancel)", ErrJobRunning)
		}
		if err := row.inSequence(); err != nil {
			return err
		}
		return c.finisher().Delete(ctx, tx, id, row.Flow)
	})
}

// JobRunNow makes the job id due now: a scheduled job, or a retrying job
// waiting for its backoff, runs when a worker is free, before the jobs of
// its priority that became due after now. A job already due keeps its
// place. A running job is an error that wraps ErrJobRunning; a blocked
// one (waiting for its dependencies), ErrJobBlocked; a completed
// or failed one, ErrJobFinished (RetryFailed puts a failed job back); an
// unknown id, ErrJobNotFound.
func (c *Client) JobRunNow(ctx context.Context, id int64) error {
	return c.inTx(ctx, func(ctx context.Context, tx bun.Tx) error { return c.JobRunNowTx(ctx, tx, id) })
}

// JobRunNowTx is JobRunNow through db: in a transaction of the app's, the
// job is due now if that transaction commits, by the clock of its
// update.
func (c *Client) JobRunNowTx(ctx context.Context, db bun.IDB, id int64) error {
	var queue string
	err := c.jobAction(ctx, db, "run now", id, func(ctx context.Context, tx bun.Tx, row *controlRow) error {
		if row == nil {
			return c.notWaiting(ctx, tx, id)
		}
		switch row.jobState() {
		case JobStateBlocked:
			return ErrJobBlocked
		case JobStateCompleted:
			return fmt.Errorf("%w: it completed", ErrJobFinished)
		case JobStateRunning:
			return fmt.Errorf("%w: a lease-mode worker holds it", ErrJobRunning)
		}
		if row.Due == 1 {
			return nil
		}
		queue = row.Queue
		return c.finisher().RunNow(ctx, tx, id)
	})
	if err != nil || queue == "" {
		return err
	}
	return c.notifyEnqueued(ctx, db, []EnqueueParams{{Opts: &EnqueueOpts{Queue: queue}}}, false) // PostgreSQL: wake the workers
}

// jobAction runs fn in a transaction of db (a savepoint, in a
// transaction) with the job id locked: row is the job, or nil if it is
// not in the jobs table. A job that another transaction holds is an error
// that wraps ErrJobRunning. The error names the action.
func (c *Client) jobAction(ctx context.Context, db bun.IDB, action string, id int64, fn func(ctx context.Context, tx bun.Tx, row *controlRow) error) error {
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		row, err := c.lockJob(ctx, tx, id)
		if err != nil {
			return err
		}
		return fn(ctx, tx, row)
	})
	if err != nil {
		return errorf("bunqueue: %s job %d: %w", action, id, c.notMigrated(err))
	}
	return nil
}

// lockJob locks the job id in tx, skipping it while another transaction
// holds it, and reads it; nil if it is not in the jobs table.
func (c *Client) lockJob(ctx context.Context, tx bun.Tx, id int64) (*controlRow, error) {
	jobs := c.jobSQL()
	for try := 1; ; try++ {
		row := new(controlRow)
		locked, err := jobs.LockJob(ctx, tx, id, row)
		if err != nil || locked {
			return row, err
		}
		err = jobs.GetJob(ctx, tx, id, row)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if try == heldTries {
			return nil, fmt.Errorf("%w: a worker holds its row locked (in lock mode, until the job ends); nothing was changed", ErrJobRunning)
		}
		t := time.NewTimer(heldWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// notWaiting is the error of an action on the job id, which is not in the
// jobs table: ErrJobFinished if it failed, else ErrJobNotFound.
func (c *Client) notWaiting(ctx context.Context, db bun.IDB, id int64) error {
	_, err := c.getFailed(ctx, db, id)
	if err == nil {
		return fmt.Errorf("%w: it failed or was cancelled (RetryFailed puts it back)", ErrJobFinished)
	}
	return err
}

// inTx runs fn in a READ COMMITTED transaction of the client's pool,
// again after a conflict (deadlock, lock wait timeout).
func (c *Client) inTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	return c.retry(ctx, func() error {
		return c.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, fn)
	})
}

// inSequence refuses to cancel or delete a job that waits in a sequence
// behind another (ErrJobBlocked): its successor would then run beside
// the job it waits for. Its sequence's head can be cancelled or deleted.
func (r *controlRow) inSequence() error {
	if r.jobState() == JobStateBlocked && r.Flow&jobsql.FlowSequence != 0 {
		return fmt.Errorf("%w: it waits in its sequence for the job before it; cancel or delete that one first", ErrJobBlocked)
	}
	return nil
}
