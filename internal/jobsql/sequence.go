package jobsql

import (
	"context"

	"github.com/uptrace/bun"
)

// The statements of sequences: jobs with the same sequence key run one at
// a time, in enqueue order. The sequences table holds, per key, its last
// job (the tail) while that job has not completed; the enqueue of the
// key's next job locks the row, makes the new job wait for the tail (a
// dependency row with the sequence's policy), and makes the new job the
// tail. Every job of a sequence has the flow bit FlowSequence, so that
// its final state, whichever it is, settles the row and its successor.

// FlowSequence is the flow bit of a job of a sequence: its final state
// settles the sequences row it is the tail of, and its successor.
const FlowSequence = 4

// PolicyHold is the value of job_deps.policy of a job that waits for its
// predecessor in its sequence, and keeps waiting when that one fails for
// good or is cancelled: until it is retried (RetryFailed re-points the
// row) or deleted (which releases it).
const PolicyHold = 3

// The states of a sequence's tail, as TailState reads them.
const (
	TailDone    = iota // completed (kept or deleted), or deleted: nothing to wait for
	TailPending        // in the jobs table, not completed: waits, is blocked, or runs
	TailFailed         // among the failed jobs: failed for good or cancelled
)

// LockSequence locks the sequences row of key, creating it if there is
// none, and returns its tail: 0 when the key had no row (no job of the
// key that has not completed). Concurrent enqueues of one key wait here
// for each other, each until the other's transaction ends; a rolled-back
// enqueue leaves the row as it was.
func (s SQL) LockSequence(ctx context.Context, db bun.IDB, key string) (int64, error) {
	var tail []int64
	if s.d.System() != "mysql" {
		// PostgreSQL and SQLite: the upsert locks the row and returns
		// the tail it had.
		err := scan(ctx, db, &tail, "INSERT INTO "+s.t.Sequences+" (seq_key, tail) VALUES (?, 0) ON CONFLICT (seq_key) DO UPDATE SET tail = "+
			s.t.Sequences+".tail RETURNING tail", key)
		if err != nil || len(tail) == 0 {
			return 0, err
		}
		return tail[0], nil
	}
	// MySQL: the upsert takes the row's exclusive lock, the read returns
	// the tail it had.
	if err := exec(ctx, db, "INSERT INTO "+s.t.Sequences+" (seq_key, tail) VALUES (?, 0) ON DUPLICATE KEY UPDATE tail = tail", key); err != nil {
		return 0, err
	}
	if err := scan(ctx, db, &tail, "SELECT tail FROM "+s.t.Sequences+" WHERE seq_key = ? FOR UPDATE", key); err != nil || len(tail) == 0 {
		return 0, err
	}
	return tail[0], nil
}

// SetTail makes the job id the tail of key, whose row tx holds locked
// (LockSequence).
func (s SQL) SetTail(ctx context.Context, db bun.IDB, key string, id int64) error {
	return exec(ctx, db, "UPDATE "+s.t.Sequences+" SET tail = ? WHERE seq_key = ?", id, key)
}

// TailState reads what the job id, a sequence's tail, has become:
// TailPending, TailFailed or TailDone. Plain reads: the tail's final
// state settles the sequence only after it took the row that the caller
// holds locked, so a final state that has not committed is settled after
// the caller's enqueue, and sees the new job.
func (s SQL) TailState(ctx context.Context, db bun.IDB, id int64) (int, error) {
	var states []int
	if err := scan(ctx, db, &states, "SELECT state FROM "+s.t.Jobs+" WHERE id = ?", id); err != nil {
		return 0, err
	}
	if len(states) == 1 {
		if states[0] == Completed {
			return TailDone, nil
		}
		return TailPending, nil
	}
	failed, err := s.FailedIDs(ctx, db, []int64{id})
	if err != nil || len(failed) == 0 {
		return TailDone, err
	}
	return TailFailed, nil
}

// tailKeys returns the keys of the sequences whose tails are the jobs of
// ids, by a plain read, which locks nothing: EndSequences, HoldSequence
// and MoveSequence then lock those rows by their primary key, as an
// enqueue does. Taking them through the index on tail would lock that
// index before the primary key, in the other order than an enqueue's
// change of the tail, and deadlock with it. The read sees the committed
// tail: a job's own enqueue committed before it could run, and an enqueue
// under way changes the tail only to its new job.
func (s SQL) tailKeys(ctx context.Context, db bun.IDB, ids []int64) ([]string, error) {
	var keys []string
	err := scan(ctx, db, &keys, "SELECT seq_key FROM "+s.t.Sequences+" WHERE tail IN (?)", bun.List(ids))
	return keys, err
}

// EndSequences deletes the sequences rows whose tails are the jobs of ids
// (on MySQL, clears their tail), which completed or were deleted: their
// keys have no job left to wait for. It waits for an enqueue that holds such a row and, once that one
// committed, leaves the row (its tail is the new job), so that the
// caller's read of the dependents that follows sees the new job's row.
func (s SQL) EndSequences(ctx context.Context, db bun.IDB, ids []int64) error {
	keys, err := s.tailKeys(ctx, db, ids)
	if err != nil || len(keys) == 0 {
		return err
	}
	if s.d.System() == "mysql" {
		// The row stays, with no tail: InnoDB checks an insert's key for
		// duplicates with a next-key lock, and two enqueues of the key
		// that both waited for the delete would deadlock on their
		// inserts. One row per key ever used, of a few hundred bytes.
		return exec(ctx, db, "UPDATE "+s.t.Sequences+" SET tail = 0 WHERE seq_key IN (?) AND tail IN (?)", bun.List(keys), bun.List(ids))
	}
	return exec(ctx, db, "DELETE FROM "+s.t.Sequences+" WHERE seq_key IN (?) AND tail IN (?)", bun.List(keys), bun.List(ids))
}

// HoldSequence locks the sequences row whose tail is the job id, which
// failed for good or was cancelled, and keeps it: the key's next jobs
// wait for the failed job. Like EndSequences, it first waits for an
// enqueue of the key that is under way.
func (s SQL) HoldSequence(ctx context.Context, db bun.IDB, id int64) error {
	keys, err := s.tailKeys(ctx, db, []int64{id})
	if err != nil || len(keys) == 0 {
		return err
	}
	return exec(ctx, db, "UPDATE "+s.t.Sequences+" SET tail = tail WHERE seq_key IN (?) AND tail = ?", bun.List(keys), id)
}

// MoveSequence makes the job newID, the failed job oldID enqueued again
// (RetryFailed), take oldID's place in its sequence: the tail of its key
// if oldID was, and the job its held successor waits for. It reports
// whether oldID had such a place (the new job then needs FlowSequence).
func (s SQL) MoveSequence(ctx context.Context, db bun.IDB, oldID, newID int64) (bool, error) {
	keys, err := s.tailKeys(ctx, db, []int64{oldID})
	if err != nil {
		return false, err
	}
	tail := false
	if len(keys) > 0 {
		r, err := db.NewRaw("UPDATE "+s.t.Sequences+" SET tail = ? WHERE seq_key IN (?) AND tail = ?", newID, bun.List(keys), oldID).Exec(ctx)
		if tail, err = affected(r, err); err != nil {
			return false, err
		}
	}
	r, err := db.NewRaw("UPDATE "+s.t.JobDeps+" SET depends_on = ? WHERE depends_on = ? AND policy = ?", newID, oldID, PolicyHold).Exec(ctx)
	held, err := affected(r, err)
	return tail || held, err
}
