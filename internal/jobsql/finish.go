package jobsql

import (
	"context"
	"strconv"
	"time"

	"github.com/uptrace/bun"
)

// completion returns the statement that completes the jobs its WHERE
// clause (to be appended) picks: a DELETE, or, to keep them (for their
// queue's retention), an UPDATE to Completed.
func (s SQL) completion(keep bool) string {
	if keep {
		return "UPDATE " + s.t.Jobs + " SET " + s.completedSet(true) + " WHERE "
	}
	return "DELETE FROM " + s.t.Jobs + " WHERE "
}

// completedSet is the SET list that keeps a job as completed: its unique
// key is released, as a deleted job's is. held says the job completes in
// the transaction that holds its lock (lock mode), whose attempt its
// attempts do not count yet: a lease counts its attempt when it is
// taken. Either way a completed job's attempts are its runs.
func (s SQL) completedSet(held bool) string {
	set := "state = " + strconv.Itoa(Completed) + ", completed_at = " + s.d.Now() +
		", unique_key = NULL, lease_token = NULL, last_error = NULL"
	if held {
		set += ", attempts = attempts + 1"
	}
	return set
}

// Complete deletes the job id, or keeps it as completed, with output as
// its output unless it is nil; with a lease token, only while the job is
// leased with it. It reports whether it changed the job.
func (s SQL) Complete(ctx context.Context, db bun.IDB, keep bool, id int64, token string, output []byte) (bool, error) {
	where, args := byLease(id, token)
	q := s.completion(false)
	if keep {
		set := s.completedSet(token == "")
		if output != nil {
			set += ", output = ?"
			args = append([]any{output}, args...)
		}
		q = "UPDATE " + s.t.Jobs + " SET " + set + " WHERE "
	}
	return affected(db.NewRaw(q+where, args...).Exec(ctx))
}

// CompleteOne is the statement that completes one job, as Complete does
// without a token, whose id is the argument marker: "?" for bun, or the
// dialect's Placeholder(1) for a statement prepared on the server.
func (s SQL) CompleteOne(keep bool, marker string) string {
	return s.completion(keep) + "id = " + marker
}

// CompleteHeld completes the jobs of ids, which tx holds locked, with one
// statement that reads them through the primary key whatever the table's
// statistics say. A plain DELETE … WHERE id IN (…) is planned by MySQL
// and MariaDB as a scan of the table when its statistics say that it is
// small, as a queue's table often is, and such a DELETE waits for every
// row it reads that other workers hold: two of them, each holding what
// the other waits for, deadlock. An UPDATE takes the index hint (and
// does not wait for rows whose last committed version does not match, at
// READ COMMITTED); a DELETE is the dialect's DeleteIDs.
func (s SQL) CompleteHeld(ctx context.Context, tx bun.IDB, keep bool, ids []int64) error {
	if keep {
		return exec(ctx, tx, "UPDATE "+s.byIDs()+" SET "+s.completedSet(true)+" WHERE id IN (?)", bun.List(ids))
	}
	return exec(ctx, tx, s.d.DeleteIDs(s.t.Jobs, len(ids)), int64Args(ids)...)
}

// Snooze reschedules the job id to run after d, with attempts as its
// count of attempts, and ends its lease; with a lease token, only while
// the job is leased with it. It reports whether it changed the job.
func (s SQL) Snooze(ctx context.Context, db bun.IDB, id int64, token string, attempts int, d time.Duration) (bool, error) {
	where, args := byLease(id, token)
	return affected(db.NewRaw("UPDATE "+s.t.Jobs+" SET attempts = ?, lease_token = NULL, run_at = "+s.d.NowPlus(d)+" WHERE "+where,
		append([]any{attempts}, args...)...).Exec(ctx))
}

// ScheduleRetry records a failed attempt of the job id, attempts and its
// error, as its last error and at the end of its attempt errors, and
// schedules the next attempt after wait, ending its lease; with a lease
// token, only while the job is leased with it. It reports whether it
// changed the job.
func (s SQL) ScheduleRetry(ctx context.Context, db bun.IDB, id int64, token string, attempts int, lastError string, wait time.Duration) (bool, error) {
	where, args := byLease(id, token)
	return affected(db.NewRaw("UPDATE "+s.t.Jobs+" SET attempts = ?, lease_token = NULL, last_error = ?, "+
		AttemptErrorsColumn+" = "+s.appendAttempt()+", run_at = "+s.d.NowPlus(wait)+" WHERE "+where,
		append([]any{attempts, lastError, attempts, attemptText(lastError)}, args...)...).Exec(ctx))
}

// MoveToFailed moves the job id to the failed jobs, with attempts and
// errorText, the error it failed with, and its attempt errors; when
// attempted, the failure ends attempt number attempts, which they gain
// at their end (a job cancelled between its attempts gains none). With a
// lease token, only while the job is leased with it. Its payload is
// copied in SQL, byte for byte. It runs two statements: db must be a
// transaction, or the job could be in both tables. It reports whether it
// moved the job.
func (s SQL) MoveToFailed(ctx context.Context, db bun.IDB, id int64, token string, attempts int, errorText string, attempted bool) (bool, error) {
	where, args := byLease(id, token)
	history, front := AttemptErrorsColumn, []any{attempts, errorText}
	if attempted {
		history, front = s.appendAttempt(), append(front, attempts, attemptText(errorText))
	}
	moved, err := affected(db.NewRaw(`INSERT INTO `+s.t.FailedJobs+`
	(job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, limit_key, error, created_at, failed_at, trace_context, `+AttemptErrorsColumn+`)
SELECT id, queue, kind, args, metadata, priority, ?, max_attempts, unique_key, limit_key, ?, created_at, `+s.d.Now()+`, trace_context, `+history+`
FROM `+s.t.Jobs+` WHERE `+where, append(front, args...)...).Exec(ctx))
	if err != nil || !moved {
		return false, err
	}
	return affected(db.NewRaw("DELETE FROM "+s.t.Jobs+" WHERE id = ?", id).Exec(ctx))
}

// CompletedIndex is the jobs table's index on (state, completed_at, id),
// as migrate creates it, through which the cleaner finds the completed
// jobs that are due.
const CompletedIndex = "jobs_completed"

// DeleteCompleted deletes, by primary key, up to limit of the jobs of
// queues kept completed that completed more than age ago, oldest first;
// with bare, only those that recorded no output; never one that an
// unfinished dependent still has a dependency row on (unneeded). It reads through the
// (state, completed_at, id) index, from its oldest entry, and steps over
// the jobs of other queues (and, with bare, the outputs) among those
// that completed before age. It returns how many it found to delete:
// fewer than limit when no more are due.
func (s SQL) DeleteCompleted(ctx context.Context, db bun.IDB, queues []string, age time.Duration, bare bool, limit int) (int, error) {
	q := "SELECT id FROM " + s.t.Jobs + " AS j" + s.hint(s.t.Index(CompletedIndex)) + " WHERE state = ? AND completed_at < " + s.d.NowPlus(-age) + " AND queue IN (?)" +
		s.unneeded()
	if bare {
		q += " AND output IS NULL"
	}
	var ids []int64
	err := db.NewRaw(q+" ORDER BY state, completed_at, id LIMIT "+strconv.Itoa(limit), Completed, bun.List(queues)).Scan(ctx, &ids)
	if err == nil && len(ids) > 0 {
		err = exec(ctx, db, "DELETE FROM "+s.t.Jobs+" WHERE id IN (?) AND state = ?", bun.List(ids), Completed)
	}
	return len(ids), err
}

// unneeded is the condition, on the jobs table as j, that keeps a
// completed job from the cleaner while a dependent that has not finished
// needs it (its output): a job with dependents whose rows remain. A job
// outside any workflow (flow 0) is not looked up.
func (s SQL) unneeded() string {
	return " AND (" + FlowColumn + " = 0 OR NOT EXISTS (SELECT 1 FROM " + s.t.JobDeps + " d WHERE d.depends_on = j.id))"
}
