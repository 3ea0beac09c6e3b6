// Package finish is the one road by which a job of the jobs table leaves
// its attempt or its table: completed, snoozed, retried, failed for good
// (by its worker or cancelled), given back, made due, deleted, revived
// from the failed jobs, or purged by retention. Every write goes through
// a transaction that the caller holds, so that what a job's new state
// implies can commit with it or not at all.
//
// A feature that reacts to a job reaching a final state (completed,
// failed for good, cancelled, deleted) adds its statements to the
// methods whose doc comment says "Final:", in the same transaction.
//
// It calls only internal/jobsql, which holds the SQL; the decisions
// (which failure is a retry, how long a backoff is, whether a job may be
// cancelled) are the caller's.
package finish

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// Prepared runs fn with the statement prepared for text on tx's
// connection, and reports whether it did: false when text is not
// prepared (yet), and the caller runs it as text. op and table name the
// statement for its span.
type Prepared func(ctx context.Context, tx bun.Tx, op, table, text string, fn func(ctx context.Context, st *sql.Stmt) error) (ok bool, err error)

// Finisher writes jobs' new states. Its zero value is not usable: see New.
type Finisher struct {
	sql      jobsql.SQL
	keep     bool     // completed jobs are kept (for their queue's retention)
	prepared Prepared // nil: every statement runs as text
}

// New returns a Finisher that writes with s; keep says that the jobs it
// completes are kept as completed rather than deleted (those that
// recorded an output are kept either way); prepared, if not nil, runs the
// lock-mode completion of one job as a prepared statement.
func New(s jobsql.SQL, keep bool, prepared Prepared) Finisher {
	return Finisher{sql: s, keep: keep, prepared: prepared}
}

// CompleteHeld completes the jobs of ids, which tx holds locked (lock
// mode), counting the attempt they ran, and keeps, with its output, each
// that recorded one (by id in outputs; nil: none did). Those without an
// output are completed by one statement (keepOutputs): one job by its
// prepared statement when prep and there is one, several by one
// statement. flows holds the flow of those that take part in a workflow
// (nil: none does), whose dependents it settles. Final: completed.
func (f Finisher) CompleteHeld(ctx context.Context, tx bun.Tx, prep bool, ids []int64, outputs map[int64][]byte, flows map[int64]int) error {
	if err := f.completeHeld(ctx, tx, prep, ids, outputs); err != nil {
		return err
	}
	return f.settleCompleted(ctx, tx, flows)
}

// completeHeld is CompleteHeld's completion of the jobs themselves.
func (f Finisher) completeHeld(ctx context.Context, tx bun.Tx, prep bool, ids []int64, outputs map[int64][]byte) error {
	ids, err := f.keepOutputs(ctx, tx, ids, "", outputs)
	if err != nil || len(ids) == 0 {
		return err
	}
	if len(ids) != 1 {
		return f.sql.CompleteHeld(ctx, tx, f.keep, ids)
	}
	if prep && f.prepared != nil {
		text := f.sql.CompleteOne(f.keep, f.sql.Marker(1))
		op, _, _ := strings.Cut(text, " ")
		ok, err := f.prepared(ctx, tx, op, f.sql.Tables().Jobs, text, func(ctx context.Context, st *sql.Stmt) error {
			_, err := st.ExecContext(ctx, ids[0])
			return err
		})
		if ok {
			return err
		}
	}
	_, err = tx.NewRaw(f.sql.CompleteOne(f.keep, "?"), ids[0]).Exec(ctx)
	return err
}

// CompleteLeased completes those of the jobs of ids that are still
// leased with token (lease mode), and keeps, with its output, each that
// recorded one (by id in outputs; nil: none did). It locks them in the
// order of their ids, as every completion does, and returns the ids it
// completed. Final: completed.
func (f Finisher) CompleteLeased(ctx context.Context, tx bun.Tx, ids []int64, token string, outputs map[int64][]byte) ([]int64, error) {
	locked, err := f.sql.LockLeased(ctx, tx, ids, token)
	if err != nil || len(locked) == 0 {
		return nil, err
	}
	held := make([]int64, len(locked))
	var flows map[int64]int
	for i, j := range locked {
		held[i] = j.ID
		if j.Flow != 0 {
			if flows == nil {
				flows = map[int64]int{}
			}
			flows[j.ID] = j.Flow
		}
	}
	rest, err := f.keepOutputs(ctx, tx, held, token, outputs)
	if err == nil && len(rest) > 0 {
		err = f.sql.CompleteLeased(ctx, tx, f.keep, rest)
	}
	if err == nil {
		err = f.settleCompleted(ctx, tx, flows)
	}
	if err != nil {
		return nil, err
	}
	return held, nil
}

// CompleteLease completes the job id if it is still leased with token
// (lease mode, a job completed on its own), kept with output as its
// output if it recorded one (nil: none), and settles its dependents if
// its flow says it takes part in a workflow. It reports whether it
// completed the job. Final: completed.
func (f Finisher) CompleteLease(ctx context.Context, tx bun.Tx, id int64, token string, output []byte, flow int) (bool, error) {
	done, err := f.sql.Complete(ctx, tx, f.keep || output != nil, id, token, output)
	if err != nil || !done || flow == 0 {
		return done, err
	}
	return true, f.settleCompleted(ctx, tx, map[int64]int{id: flow})
}

// keepOutputs completes the jobs of ids, which tx holds (with a lease
// token, leased with it), that recorded an output: each is kept as
// completed with its output, by one UPDATE that stands in the statement
// that would have completed it, whatever the queue's retention. It
// returns the ids of the others, for the caller to complete. Without
// outputs, the default, it runs nothing and returns ids.
func (f Finisher) keepOutputs(ctx context.Context, tx bun.Tx, ids []int64, token string, outputs map[int64][]byte) ([]int64, error) {
	if len(outputs) == 0 {
		return ids, nil
	}
	rest := make([]int64, 0, len(ids))
	for _, id := range ids {
		out := outputs[id]
		if out == nil {
			rest = append(rest, id)
			continue
		}
		if _, err := f.sql.Complete(ctx, tx, true, id, token, out); err != nil {
			return nil, err
		}
	}
	return rest, nil
}

// Release gives the job id back to its queue at once, if it is still
// leased with token, without using the attempt its lease counted. It
// reports whether it did.
func (f Finisher) Release(ctx context.Context, tx bun.Tx, id int64, token string) (bool, error) {
	return f.sql.Release(ctx, tx, id, token)
}

// Snooze puts the job id back to run after d, with attempts as its count
// of attempts (the snoozed one not counted); with a lease token, only if
// it is still leased with it. It reports whether it changed the job.
func (f Finisher) Snooze(ctx context.Context, tx bun.Tx, id int64, token string, attempts int, d time.Duration) (bool, error) {
	return f.sql.Snooze(ctx, tx, id, token, attempts, d)
}

// Retry records the failed attempt number attempt of the job id, with
// its error text, and schedules the next after wait; with a lease token,
// only if it is still leased with it. It reports whether it changed the
// job.
func (f Finisher) Retry(ctx context.Context, tx bun.Tx, id int64, token string, attempt int, text string, wait time.Duration) (bool, error) {
	return f.sql.ScheduleRetry(ctx, tx, id, token, attempt, text, wait)
}

// Fail moves the job id to the failed jobs for good, with attempts and
// its error text: a worker's last attempt or its Cancel (attempted: the
// failure ends attempt number attempts, whose error joins its attempt
// errors), or a cancel between attempts (not attempted). With a lease
// token, only if it is still leased with it. flow is the job's: if it
// takes part in a workflow, its dependents' policies are applied. It
// reports whether it moved the job. Final: failed for good, or
// cancelled.
func (f Finisher) Fail(ctx context.Context, tx bun.Tx, id int64, token string, attempts int, text string, attempted bool, flow int) (bool, error) {
	moved, err := f.sql.MoveToFailed(ctx, tx, id, token, attempts, text, attempted)
	if err != nil || !moved || flow == 0 {
		return moved, err
	}
	how := EndFailed
	if !attempted {
		how = EndCancelled
	}
	return true, f.settleEnded(ctx, tx, id, flow, how)
}

// RunNow makes the job id, which tx holds locked, due now.
func (f Finisher) RunNow(ctx context.Context, tx bun.Tx, id int64) error {
	return f.sql.RunNow(ctx, tx, id)
}

// Delete deletes the job id, which tx holds locked, from the jobs table;
// flow is the job's, whose dependents' policies are applied if it takes
// part in a workflow. Final: deleted.
func (f Finisher) Delete(ctx context.Context, tx bun.Tx, id int64, flow int) error {
	if err := f.sql.DeleteJob(ctx, tx, id); err != nil || flow == 0 {
		return err
	}
	return f.settleEnded(ctx, tx, id, flow, EndDeleted)
}

// DeleteFailed deletes the failed job whose id in the failed-jobs table
// is id (byJobID false) or whose id in the jobs table was id (byJobID
// true), and reports whether there was one. What it held in its
// sequence is released (ReleaseHeld). Final: deleted.
func (f Finisher) DeleteFailed(ctx context.Context, tx bun.Tx, id int64, byJobID bool) (bool, error) {
	jobID := id
	if !byJobID {
		var err error
		if jobID, err = f.sql.FailedJobID(ctx, tx, id); err != nil || jobID == 0 {
			return false, err
		}
	}
	gone, err := f.sql.DeleteFailedByJobID(ctx, tx, jobID)
	if err != nil || !gone {
		return gone, err
	}
	return true, f.ReleaseHeld(ctx, tx, jobID)
}

// Revive ends the failed job failedID, which tx holds locked, once the
// caller has enqueued it again as newID: its attempt errors go with it,
// unless the enqueue found a duplicate (dup) that has its own.
func (f Finisher) Revive(ctx context.Context, tx bun.Tx, failedID, newID int64, dup bool) error {
	if !dup {
		if err := f.sql.CopyAttemptErrors(ctx, tx, failedID, newID); err != nil {
			return err
		}
	}
	_, err := f.sql.DeleteFailed(ctx, tx, failedID)
	return err
}

// Purge deletes up to limit of the jobs of queues kept completed that
// completed more than age ago, oldest first (with bare, only those that
// recorded no output), and returns how many it found due: fewer than
// limit when no more are.
func (f Finisher) Purge(ctx context.Context, tx bun.Tx, queues []string, age time.Duration, bare bool, limit int) (int, error) {
	return f.sql.DeleteCompleted(ctx, tx, queues, age, bare, limit)
}
