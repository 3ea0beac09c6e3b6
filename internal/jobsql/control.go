package jobsql

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// JobColumns are the jobs table's columns that JobGet and JobList read,
// and due, whether the job's run_at has come by the database clock: a
// model that GetJob, LockJob and ListJobs scan into has a field for each.
func (s SQL) JobColumns() string {
	return "id, queue, kind, args, metadata, priority, state, attempts, max_attempts, run_at, created_at, completed_at, " +
		"last_error, unique_key, lease_token, output, " + AttemptErrorsColumn + ", " + FlowColumn + ", CASE WHEN run_at <= " + s.d.Now() + " THEN 1 ELSE 0 END AS due"
}

// The indexes that serve ListJobs and FailedByJobID, without the tables'
// prefix; a Listing names its index with it.
const (
	ListStateIndex       = migrate.ListStateIndex
	ListQueueIndex       = migrate.ListQueueIndex
	ListKindIndex        = migrate.ListKindIndex
	FailedJobIDIndex     = migrate.FailedJobIDIndex
	FailedListQueueIndex = migrate.FailedListQueueIndex
	FailedListKindIndex  = migrate.FailedListKindIndex
)

// GetJob reads the job id of the jobs table into dest, a pointer to a
// model with the JobColumns. It returns sql.ErrNoRows if there is none.
func (s SQL) GetJob(ctx context.Context, db bun.IDB, id int64, dest any) error {
	return db.NewRaw("SELECT "+s.JobColumns()+" FROM "+s.t.Jobs+" WHERE id = ?", id).Scan(ctx, dest)
}

// LockJob reads the job id into dest, as GetJob does, and locks it until
// tx ends, skipping it if another transaction holds it (a worker that
// runs it in lock mode, or one that is claiming it). It reports whether
// it locked the job: false with a nil error when there is no such job or
// it is held; GetJob tells which. Where the server has no row locks
// (SQLite), tx holds the database's write lock already, and no worker
// holds the job meanwhile.
func (s SQL) LockJob(ctx context.Context, tx bun.IDB, id int64, dest any) (bool, error) {
	q := "SELECT " + s.JobColumns() + " FROM " + s.t.Jobs + " WHERE id = ?"
	if lock := s.d.SkipLocked(); lock != "" {
		q += " FOR " + lock
	}
	err := tx.NewRaw(q, id).Scan(ctx, dest)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// RunNow makes the job id, which tx holds locked, due now.
func (s SQL) RunNow(ctx context.Context, tx bun.IDB, id int64) error {
	return exec(ctx, tx, "UPDATE "+s.t.Jobs+" SET run_at = "+s.d.Now()+" WHERE id = ?", id)
}

// DeleteJob deletes the job id, which tx holds locked.
func (s SQL) DeleteJob(ctx context.Context, tx bun.IDB, id int64) error {
	return exec(ctx, tx, "DELETE FROM "+s.t.Jobs+" WHERE id = ?", id)
}

// FailedByJobID reads the newest failed job whose job_id is id into dest,
// a pointer to a model with the FailedColumns, through the job_id index.
// It returns sql.ErrNoRows if there is none.
func (s SQL) FailedByJobID(ctx context.Context, db bun.IDB, id int64, dest any) error {
	return db.NewRaw("SELECT "+FailedColumns+" FROM "+s.t.FailedJobs+" WHERE job_id = ? ORDER BY id DESC LIMIT 1", id).Scan(ctx, dest)
}

// DeleteFailedByJobID deletes the failed jobs whose job_id is id, and
// reports whether there was one.
func (s SQL) DeleteFailedByJobID(ctx context.Context, db bun.IDB, id int64) (bool, error) {
	return affected(db.NewRaw("DELETE FROM "+s.t.FailedJobs+" WHERE job_id = ?", id).Exec(ctx))
}

// WaitingState is one of the states of a job of the jobs table whose state
// column is Waiting, told apart by other columns: JobList's pending,
// scheduled, retrying and running.
type WaitingState int

// The WaitingStates. A running job is one leased (lease mode) and whose
// lease has not run out; a job whose lease ran out is retrying, as it
// waits to be claimed again.
const (
	Pending   WaitingState = iota // first attempt, due
	Scheduled                     // first attempt, not due yet
	Retrying                      // attempted before, not running
	Running                       // leased, the lease not over
)

// predicate is the condition on a waiting job's columns of w.
func (s SQL) predicate(w WaitingState) string {
	now := s.d.Now()
	free := "(lease_token IS NULL OR run_at <= " + now + ")"
	switch w {
	case Pending:
		return "(attempts = 0 AND run_at <= " + now + ")"
	case Scheduled:
		return "(attempts = 0 AND lease_token IS NULL AND run_at > " + now + ")"
	case Retrying:
		return "(attempts > 0 AND " + free + ")"
	default:
		return "(lease_token IS NOT NULL AND run_at > " + now + ")"
	}
}

// ListFilter selects the jobs of one table for ListJobs and ListFailedJobs,
// as bunqueue.JobListFilter does, its values checked.
type ListFilter struct {
	// Queue and Kind, when not empty, keep only jobs of that queue and
	// kind.
	Queue string
	Kind  string
	// Waiting, for ListJobs of the Waiting state, keeps only the jobs in
	// one of these; empty keeps them all.
	Waiting []WaitingState
	// CreatedFrom and CreatedBefore, when not zero, keep only jobs created
	// at or after, and before, them.
	CreatedFrom, CreatedBefore time.Time
	// BeforeID, when positive, keeps only jobs whose id (job_id, of a
	// failed job) is below it; FromID, when positive, only those at or
	// above it.
	BeforeID, FromID int64
	// Search, when not empty, keeps only jobs whose args or error contain
	// it, as Dialect.Contains compares.
	Search string
	// Limit is the most jobs read.
	Limit int
}

// where returns the conditions of f other than the state, on the column
// id (id or job_id), and their arguments.
func (s SQL) where(f ListFilter, id string) ([]string, []any) {
	var where []string
	var args []any
	if f.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, f.Queue)
	}
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, f.Kind)
	}
	if !f.CreatedFrom.IsZero() {
		where = append(where, "created_at >= "+s.d.Time(f.CreatedFrom))
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+s.d.Time(f.CreatedBefore))
	}
	if f.BeforeID > 0 {
		where, args = append(where, id+" < ?"), append(args, f.BeforeID)
	}
	if f.FromID > 0 {
		where, args = append(where, id+" >= ?"), append(args, f.FromID)
	}
	return where, args
}

// search returns f's condition on the args and the error column errCol,
// and its arguments; none without a Search.
func (s SQL) search(f ListFilter, errCol string) ([]string, []any) {
	if f.Search == "" {
		return nil, nil
	}
	return []string{"(" + s.d.Contains("args", true) + " OR " + s.d.Contains(errCol, false) + ")"}, []any{f.Search, f.Search}
}

// Listing is one statement of a job listing: its SQL, arguments, and
// the index it is meant to read.
type Listing struct {
	Query string
	Args  []any
	Index string
}

// ListJobs reads the jobs of the jobs table in state (Waiting, Completed
// or Blocked) that f selects, newest first (by id), into dest, a pointer
// to a slice of a model with the JobColumns: the statement of
// JobsListing.
func (s SQL) ListJobs(ctx context.Context, db bun.IDB, state int, f ListFilter, dest any) error {
	l := s.JobsListing(state, f)
	return scan(ctx, db, dest, l.Query, l.Args...)
}

// JobsListing is ListJobs's statement. It walks an index backwards whose
// columns are the state, the queue or kind when f has one, and the id,
// and stops at the LIMIT: each page reads the rows just below the last
// one of the page before. The other conditions filter the rows that the
// index yields.
func (s SQL) JobsListing(state int, f ListFilter) Listing {
	return s.jobsRead(state, f, s.JobColumns())
}

// jobsRead is JobsListing's statement, reading the columns cols.
func (s SQL) jobsRead(state int, f ListFilter, cols string) Listing {
	where, args := s.where(f, "id")
	where, args = append([]string{"state = ?"}, where...), append([]any{state}, args...)
	cond, cargs := s.search(f, "last_error")
	where, args = append(where, cond...), append(args, cargs...)
	if state == Waiting && len(f.Waiting) > 0 {
		or := make([]string, len(f.Waiting))
		for i, w := range f.Waiting {
			or[i] = s.predicate(w)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	index := ListStateIndex
	switch {
	case f.Queue != "":
		index = ListQueueIndex
	case f.Kind != "":
		index = ListKindIndex
	}
	index = s.t.Index(index)
	q := "SELECT " + cols + " FROM " + s.t.Jobs + s.hint(index) + " WHERE " + strings.Join(where, " AND ") +
		" ORDER BY id DESC LIMIT " + strconv.Itoa(f.Limit)
	return Listing{Query: q, Args: args, Index: index}
}

// ListFailedJobs reads the failed jobs that f selects, newest first by
// their job_id, into dest, a pointer to a slice of a model with the
// FailedColumns: the statement of FailedListing.
func (s SQL) ListFailedJobs(ctx context.Context, db bun.IDB, f ListFilter, dest any) error {
	l := s.FailedListing(f)
	return scan(ctx, db, dest, l.Query, l.Args...)
}

// FailedListing is ListFailedJobs's statement. It walks the (queue,
// job_id), (kind, job_id) or (job_id) index backwards, as JobsListing
// does.
func (s SQL) FailedListing(f ListFilter) Listing {
	return s.failedRead(f, FailedColumns)
}

// failedRead is FailedListing's statement, reading the columns cols.
func (s SQL) failedRead(f ListFilter, cols string) Listing {
	where, args := s.where(f, "job_id")
	cond, cargs := s.search(f, "error")
	where, args = append(where, cond...), append(args, cargs...)
	index := FailedJobIDIndex
	switch {
	case f.Queue != "":
		index = FailedListQueueIndex
	case f.Kind != "":
		index = FailedListKindIndex
	}
	index = s.t.Index(index)
	q := "SELECT " + cols + " FROM " + s.t.FailedJobs + s.hint(index)
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY job_id DESC LIMIT " + strconv.Itoa(f.Limit)
	return Listing{Query: q, Args: args, Index: index}
}

// Listings returns a statement of each shape that JobList sends, one per
// table, state and index, listing queue's jobs, or kind's, or all, one
// page of limit, with a cursor: those the plan check explains. With
// them, the shapes of a search: each read of SearchRange's, of scan
// rows, and each listing of a search's range.
func (s SQL) Listings(queue, kind string, limit, scan int) []Listing {
	filters := []ListFilter{{Queue: queue}, {Kind: kind}, {}}
	var out []Listing
	for _, f := range filters {
		f.Limit, f.BeforeID = limit, 1<<62
		out = append(out, s.JobsListing(Waiting, f), s.JobsListing(Completed, f), s.FailedListing(f))
		ids := f
		ids.Limit = scan
		out = append(out, s.jobsRead(Waiting, ids, "id"), s.jobsRead(Completed, ids, "id"), s.failedRead(ids, "job_id AS id"))
		f.Search, f.FromID = "bunqueue.plan-check", 1<<61
		out = append(out, s.JobsListing(Waiting, f), s.JobsListing(Completed, f), s.FailedListing(f))
	}
	return out
}

// HasIndex reports whether the jobs tables have the index named index
// (with its prefix), in the connection's database, or the tables' schema.
func (s SQL) HasIndex(ctx context.Context, db bun.IDB, index string) (bool, error) {
	q := map[string]string{
		"postgresql": "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = COALESCE(NULLIF('" + s.t.Schema() + "', ''), current_schema()) AND indexname = ?",
		"sqlite":     "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?",
	}[s.d.System()]
	if q == "" {
		q = "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = ?"
	}
	var n int
	err := db.NewRaw(q, index).Scan(ctx, &n)
	return n > 0, err
}

// hint is the table hint that makes a listing read through index, with
// its leading space: MySQL's FORCE INDEX, SQLite's INDEXED BY (which the
// dialect's ForceIndex leaves out for the claims), none on PostgreSQL.
// Planned by the statistics alone, MySQL may take the claim index, whose
// (queue, state) prefix also matches a listing of a queue, and sort its
// rows; and SQLite, which keeps coarser statistics, scans a table that
// one queue fills.
func (s SQL) hint(index string) string {
	if s.d.System() == "sqlite" {
		return " INDEXED BY " + index
	}
	if h := s.d.ForceIndex(index); h != "" {
		return " " + h
	}
	return ""
}
