package jobsql

import (
	"context"
	"database/sql"

	"github.com/uptrace/bun"
)

// The reads of this file count jobs for the command-line tool's stats.
// None locks anything, and each is served by an index: the claim index,
// or the failed jobs' (queue, kind, id).

// Queues returns the names of the queues that have jobs, by a loose scan
// of the claim index.
func (s SQL) Queues(ctx context.Context, db bun.IDB) ([]string, error) {
	var queues []string
	err := scan(ctx, db, &queues, "SELECT DISTINCT queue FROM "+s.t.Jobs)
	return queues, err
}

// QueueKind is a queue and a kind of job, as FailedKinds reads them.
type QueueKind struct {
	Queue string // the queue's name
	Kind  string // the kind of job
}

// FailedKinds returns the queues and kinds that have failed jobs, by a
// loose scan of the failed jobs' (queue, kind, id) index.
func (s SQL) FailedKinds(ctx context.Context, db bun.IDB) ([]QueueKind, error) {
	var kinds []QueueKind
	err := scan(ctx, db, &kinds, "SELECT DISTINCT queue, kind FROM "+s.t.FailedJobs)
	return kinds, err
}

// CountFailed counts the failed jobs of a queue and kind, up to limit.
func (s SQL) CountFailed(ctx context.Context, db bun.IDB, queue, kind string, limit int) (int, error) {
	var n int
	err := db.NewRaw("SELECT COUNT(*) FROM (SELECT 1 FROM "+s.t.FailedJobs+" WHERE queue = ? AND kind = ? LIMIT ?) f",
		queue, kind, limit).Scan(ctx, &n)
	return n, err
}

// KindCount counts the waiting jobs of one kind: Total of them, Due of
// which are due now.
type KindCount struct {
	Kind  string // the kind of job
	Due   int    // jobs due now
	Total int    // jobs due now or later
}

// CountWaiting counts, by kind, at most limit waiting jobs of queue,
// taken from the claim index and then grouped.
func (s SQL) CountWaiting(ctx context.Context, db bun.IDB, queue string, limit int) ([]KindCount, error) {
	var kinds []KindCount
	// COUNT of a CASE, not SUM of a comparison: an integer on every
	// server (MySQL's SUM is a DECIMAL, PostgreSQL has no boolean SUM).
	err := scan(ctx, db, &kinds, "SELECT kind, COUNT(CASE WHEN run_at <= "+s.d.Now()+" THEN 1 END) AS due, COUNT(*) AS total "+
		"FROM (SELECT kind, run_at FROM "+s.t.Jobs+" WHERE queue = ? AND state = ? LIMIT ?) w GROUP BY kind",
		queue, Waiting, limit)
	return kinds, err
}

// Priorities returns the priorities of the waiting jobs of queue.
func (s SQL) Priorities(ctx context.Context, db bun.IDB, queue string) ([]int, error) {
	var priorities []int
	err := scan(ctx, db, &priorities, "SELECT DISTINCT priority FROM "+s.t.Jobs+" WHERE queue = ? AND state = ?", queue, Waiting)
	return priorities, err
}

// OldestDue returns the smallest run_at of the due jobs of queue with
// priority, an index dive into the claim index, and the database clock,
// read by the same statement: the age is their difference, whatever the
// server. first is not valid when no job is due.
func (s SQL) OldestDue(ctx context.Context, db bun.IDB, queue string, priority int) (first, now sql.NullTime, err error) {
	err = db.NewRaw("SELECT MIN(run_at), "+s.d.Now()+" FROM "+s.t.Jobs+
		" WHERE queue = ? AND state = ? AND priority = ? AND run_at <= "+s.d.Now(), queue, Waiting, priority).
		Scan(ctx, &first, &now)
	return first, now, err
}
