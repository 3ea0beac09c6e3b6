package jobsql

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// Lease leases the jobs of ids, which tx holds locked, to token for lease
// from now by the database clock, and counts an attempt for each: their
// run_at becomes the lease's end.
func (s SQL) Lease(ctx context.Context, tx bun.IDB, ids []int64, token string, lease time.Duration) error {
	return exec(ctx, tx, "UPDATE "+s.byIDs()+" SET attempts = attempts + 1, lease_token = ?, run_at = "+s.d.NowPlus(lease)+" WHERE id IN (?)",
		token, bun.List(ids))
}

// Release gives the job id back to its queue at once, without using the
// attempt its lease counted, if it is still leased with token. It reports
// whether it did.
func (s SQL) Release(ctx context.Context, db bun.IDB, id int64, token string) (bool, error) {
	return affected(db.NewRaw("UPDATE "+s.t.Jobs+" SET attempts = attempts - 1, lease_token = NULL, run_at = "+s.d.Now()+" WHERE id = ? AND lease_token = ?",
		id, token).Exec(ctx))
}

// Extend pushes the leases of the jobs of ids that are still leased with
// token to lease from now, by the database clock, and returns how many it
// extended: zero when the server does not say, so that the caller reads
// which are still leased (Leased).
func (s SQL) Extend(ctx context.Context, db bun.IDB, ids []int64, token string, lease time.Duration) (int64, error) {
	r, err := db.NewRaw("UPDATE "+s.byIDs()+" SET run_at = "+s.d.NowPlus(lease)+" WHERE id IN (?) AND lease_token = ?",
		bun.List(ids), token).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := r.RowsAffected()
	return n, nil
}

// Leased returns which of the jobs of ids are still leased with token.
func (s SQL) Leased(ctx context.Context, db bun.IDB, ids []int64, token string) ([]int64, error) {
	var still []int64
	err := scan(ctx, db, &still, "SELECT id FROM "+s.byIDs()+" WHERE id IN (?) AND lease_token = ?", bun.List(ids), token)
	return still, err
}

// LockLeased locks, in tx, those of the jobs of ids that are still
// leased with token, in the order of their ids (the order every
// completion takes them in), and returns them: their ids and their flow
// (read by the same statement, so that a job's dependents added while
// it ran are not missed).
func (s SQL) LockLeased(ctx context.Context, tx bun.IDB, ids []int64, token string) ([]FlowJob, error) {
	q := "SELECT id, state, " + FlowColumn + ", lease_token FROM " + s.byIDs() + " WHERE id IN (?) AND lease_token = ? ORDER BY id"
	if lock := s.d.ForUpdate(); lock != "" {
		q += " FOR " + lock
	}
	var ours []FlowJob
	err := scan(ctx, tx, &ours, q, bun.List(ids), token)
	return ours, err
}

// CompleteLeased completes the jobs of ids, leased jobs that tx locks
// (see LockLeased), in one statement: deletes them, or, with keep, keeps
// them as completed; their attempts were counted when they were leased.
func (s SQL) CompleteLeased(ctx context.Context, tx bun.IDB, keep bool, ids []int64) error {
	if keep {
		return exec(ctx, tx, "UPDATE "+s.byIDs()+" SET "+s.completedSet(false)+" WHERE id IN (?)", bun.List(ids))
	}
	return exec(ctx, tx, s.d.DeleteIDs(s.t.Jobs, len(ids)), int64Args(ids)...)
}
