package jobsql

import (
	"context"
	"strings"

	"github.com/uptrace/bun"
)

// FailedColumns are the failed-jobs table's columns, in its order: a
// model that ListFailed and LockFailed scan into has a field for each.
const FailedColumns = "id, job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, limit_key, error, created_at, failed_at, trace_context, " + AttemptErrorsColumn

// FailedFilter selects failed jobs, as bunqueue.FailedJobsFilter does,
// its values checked.
type FailedFilter struct {
	// Queue and Kind, when not empty, keep only failed jobs of that queue
	// and kind.
	Queue string
	Kind  string
	// BeforeID, when positive, keeps only failed jobs whose id is below it.
	BeforeID int64
	// Limit is the most failed jobs read.
	Limit int
}

// ListFailed reads the failed jobs that f selects, newest first, into
// dest, a pointer to a slice of a model with the FailedColumns. With a
// queue and a kind it walks the (queue, kind, id) index backwards.
func (s SQL) ListFailed(ctx context.Context, db bun.IDB, dest any, f FailedFilter) error {
	var where []string
	var args []any
	if f.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, f.Queue)
	}
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, f.Kind)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	q := "SELECT " + FailedColumns + " FROM " + s.t.FailedJobs
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return scan(ctx, db, dest, q+" ORDER BY id DESC LIMIT ?", append(args, f.Limit)...)
}

// LockFailed reads the failed job id into dest, a pointer to a model with
// the FailedColumns, and locks it (Dialect.ForUpdate) until tx ends, so
// that two retries of it cannot both put it back. It returns
// sql.ErrNoRows if there is none.
func (s SQL) LockFailed(ctx context.Context, tx bun.IDB, id int64, dest any) error {
	q := "SELECT " + FailedColumns + " FROM " + s.t.FailedJobs + " WHERE id = ?"
	if lock := s.d.ForUpdate(); lock != "" {
		q += " FOR " + lock
	}
	return tx.NewRaw(q, id).Scan(ctx, dest)
}

// DeleteFailed deletes the failed job id, and reports whether there was
// one.
func (s SQL) DeleteFailed(ctx context.Context, db bun.IDB, id int64) (bool, error) {
	return affected(db.NewRaw("DELETE FROM "+s.t.FailedJobs+" WHERE id = ?", id).Exec(ctx))
}

// FailedJobID returns the id in the jobs table of the failed job id (its
// id in the failed-jobs table); 0 when there is none.
func (s SQL) FailedJobID(ctx context.Context, db bun.IDB, id int64) (int64, error) {
	var ids []int64
	if err := scan(ctx, db, &ids, "SELECT job_id FROM "+s.t.FailedJobs+" WHERE id = ?", id); err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[0], nil
}
