package jobsql

import (
	"context"

	"github.com/uptrace/bun"
)

// The reads of this file are the test helpers' (bunqueuetest): they look
// for pending jobs, those that are still to run (waiting, scheduled,
// running or waiting for a retry), by kind. None locks anything. They are
// not served by an index on kind (the jobs table has none): they are for
// a test's database, not a production backlog.

// PendingColumns are the columns that ListPending and GetPending read, in
// their order: a model they scan into has a field for each.
const PendingColumns = "id, queue, kind, args, metadata, priority, attempts, max_attempts, run_at, created_at, unique_key, lease_token"

// pendingFrom is the start of a read of pending jobs, before its
// conditions on them.
func (s SQL) pendingFrom() string {
	return "SELECT " + PendingColumns + " FROM " + s.t.Jobs + " WHERE state = "
}

// ListPending reads the pending jobs of kind, in id order, into dest, a
// pointer to a slice of a model with the PendingColumns.
func (s SQL) ListPending(ctx context.Context, db bun.IDB, dest any, kind string) error {
	return scan(ctx, db, dest, s.pendingFrom()+"? AND kind = ? ORDER BY id", Waiting, kind)
}

// GetPending reads the job id into dest, a pointer to a slice of a model
// with the PendingColumns, if it is pending: dest is left empty if it is
// not (it completed, failed, or never was).
func (s SQL) GetPending(ctx context.Context, db bun.IDB, dest any, id int64) error {
	return scan(ctx, db, dest, s.pendingFrom()+"? AND id = ?", Waiting, id)
}

// PendingKinds counts the pending jobs by kind (KindCount.Total; Due of
// them due now), in kind order, for at most limit kinds.
func (s SQL) PendingKinds(ctx context.Context, db bun.IDB, limit int) ([]KindCount, error) {
	var kinds []KindCount
	err := scan(ctx, db, &kinds, "SELECT kind, COUNT(CASE WHEN run_at <= "+s.d.Now()+" THEN 1 END) AS due, COUNT(*) AS total FROM "+s.t.Jobs+
		" WHERE state = ? GROUP BY kind ORDER BY kind LIMIT ?", Waiting, limit)
	return kinds, err
}

// Due reports whether the pending job id is due by the database clock,
// that is, whether its run_at has come; ok is false if it is not pending.
func (s SQL) Due(ctx context.Context, db bun.IDB, id int64) (due, ok bool, err error) {
	var dues []int
	err = scan(ctx, db, &dues, "SELECT CASE WHEN run_at <= "+s.d.Now()+" THEN 1 ELSE 0 END FROM "+s.t.Jobs+
		" WHERE state = ? AND id = ?", Waiting, id)
	if err != nil || len(dues) == 0 {
		return false, false, err
	}
	return dues[0] == 1, true, nil
}
