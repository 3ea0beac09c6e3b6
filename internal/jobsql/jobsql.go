// Package jobsql holds every statement on the jobs tables, as named
// operations: the library's (enqueue, claim, complete, fail, lease,
// clean, failed jobs) and the command-line tool's (stats). The tables'
// names come from internal/migrate, which creates them; what differs
// between servers (the clock, lock clauses, index hints, how an insert
// skips a taken unique key) comes from sqldialect.Dialect. Neither the
// library nor the tool's commands write SQL on these tables elsewhere, so
// a change of a column or of a statement's shape is made here, once, for
// every server. (The bench's scenarios still write their own.)
//
// The values a statement carries were checked before they get here;
// times are set and compared in SQL, on the database clock.
package jobsql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// ClaimIndex returns the name of the jobs table's index on (queue,
// state, priority, run_at, id), which serves ClaimQuery: reads and claims
// at the head of a jobs queue go through it.
func (s SQL) ClaimIndex() string { return s.t.Index(migrate.ClaimIndex) }

// LimitKeyColumn is the jobs table's column of EnqueueOpts.LimitKey.
const LimitKeyColumn = "limit_key"

// The values of the jobs table's state column.
const (
	// Waiting is a job that waits for its run_at, or runs: in lease mode,
	// a leased job is waiting with its lease's end as run_at.
	Waiting = 0
	// Completed is a job that completed and is kept: for its queue's
	// retention, or for its output's.
	Completed = 1
)

// SQL is the statements on the jobs tables of one kind of server, by
// their names. Its methods run them through the bun.IDB they are given,
// which may be a transaction.
type SQL struct {
	d sqldialect.Dialect
	t tables.Names
}

// New returns the statements of d's server on the tables t.
func New(d sqldialect.Dialect, t tables.Names) SQL { return SQL{d: d, t: t} }

// Tables returns the names of the tables the statements are on.
func (s SQL) Tables() tables.Names { return s.t }

// Marker is the argument marker number i (from 1) of a statement
// prepared on the server: "?" on MySQL, MariaDB and SQLite, "$i" on
// PostgreSQL.
func (s SQL) Marker(i int) string { return s.d.Placeholder(i) }

// ClaimQuery returns the query of the jobs of queue that are due, in the
// order they run: a jobs queue's query in the engine, which claims with
// it in both modes. While a job is leased its run_at is the lease's end,
// so an expired lease makes it match again, with no sweeper.
func (s SQL) ClaimQuery(queue string) func(*bun.SelectQuery) *bun.SelectQuery {
	due := "run_at <= " + s.d.Now()
	return func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("queue = ?", queue).
			Where("state = ?", Waiting).
			Where(due).
			Order("priority", "run_at", "id")
	}
}

// WaitColumn is the column a claim with ClaimQuery reads besides the
// job's: waited_us, the microseconds from the job's run_at (when it became
// due) to the claim statement's time, both on the database clock. The
// claim's WHERE makes it zero or more. It is an expression on the rows
// the claim reads, so it costs the claim no read.
func (s SQL) WaitColumn() string {
	return s.d.MicrosSince("run_at") + " AS waited_us"
}

// byIDs is the jobs table for a statement on a list of its ids: read
// through its primary key where the dialect can say so. Planned by the
// statistics alone, such a statement is a scan of the table when they say
// that it is small (a queue's table often is, or was when they were last
// taken), and a scan under a lock reads, and locks for a moment, rows that
// other workers are about to claim.
func (s SQL) byIDs() string {
	if hint := s.d.ForcePrimary(); hint != "" {
		return s.t.Jobs + " " + hint
	}
	return s.t.Jobs
}

// byLease is the WHERE clause, and its arguments, of a statement on the
// job id: with a lease token, only while the job is leased with it, so
// that a worker whose lease ran out cannot change a job that another
// worker now holds.
func byLease(id int64, token string) (string, []any) {
	if token == "" {
		return "id = ?", []any{id}
	}
	return "id = ? AND lease_token = ?", []any{id, token}
}

// affected reports whether a statement's result changed rows.
func affected(r interface{ RowsAffected() (int64, error) }, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// int64Args returns ids as query arguments.
func int64Args(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

// exec runs a statement that returns no rows.
func exec(ctx context.Context, db bun.IDB, query string, args ...any) error {
	_, err := db.NewRaw(query, args...).Exec(ctx)
	return err
}

// scan runs a query whose rows fill dest, a pointer to a slice: no rows
// leave it empty.
func scan(ctx context.Context, db bun.IDB, dest any, query string, args ...any) error {
	if err := db.NewRaw(query, args...).Scan(ctx, dest); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return nil
}
