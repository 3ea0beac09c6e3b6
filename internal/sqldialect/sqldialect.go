// Package sqldialect holds the SQL that differs between database servers,
// behind one small interface chosen from the bun dialect.
package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/schema"
)

// Dialect is what the engine needs to know about a database server.
type Dialect interface {
	Sessions
	// SkipLocked is the argument to bun's SelectQuery.For that locks the
	// selected rows and skips rows other transactions hold; empty where
	// the server has no row locks (see Locking).
	SkipLocked() string
	// ForUpdate is the argument to SelectQuery.For that locks the selected
	// rows for a change that keeps their keys, waiting for other
	// transactions' locks; empty where the server has no row locks.
	ForUpdate() string
	// TxLost reports whether tx is gone after one of its statements was
	// cut short by the end of its context: the driver closed the
	// connection, or the server rolled the transaction back.
	TxLost(ctx context.Context, tx bun.Tx) bool
	// Retryable reports whether err is a transient conflict (deadlock,
	// lock wait timeout) after which the transaction should be retried.
	Retryable(err error) bool
	// Refused reports whether err is the server's refusal of a statement
	// itself (an SQL error with its code), not a conflict, a lost
	// connection, a session ended on the server, or an error of this
	// process: after it, a prepared statement is dropped.
	Refused(err error) bool
	// CheckServer proves, with two connections, that the server skips
	// locked rows instead of waiting for them or ignoring the clause. It
	// locks rows of probe, a two-row table it creates if it is missing.
	CheckServer(ctx context.Context, db *bun.DB, probe string) error
	// CheckTable checks that the table exists and that its storage engine
	// takes row locks. schema may be empty for the connection's database.
	CheckTable(ctx context.Context, db *bun.DB, schema, table string) error
	// ClientSide reports whether err arose on the client's side of the
	// database, in this process, such as a value that does not fit the
	// model, rather than on the server, on the connection or from a
	// cancelled context: the engine then blames the row, not the batch.
	ClientSide(err error) bool
	// PrimaryKey returns the columns of the table's primary key, in
	// order; none when it has no primary key.
	PrimaryKey(ctx context.Context, db bun.IDB, schema, table string) ([]string, error)
	// Explain runs EXPLAIN on query, a SELECT, and returns its plan;
	// Plan.Problems tells what in it scans or sorts.
	Explain(ctx context.Context, db bun.IDB, query string) (Plan, error)
	// ReadSetup is the statement a queue's feed runs once on its own
	// connection, so that its plain reads of waiting rows (which only
	// suggest rows: a claim locks each and checks the query again) cost
	// the server as little as they can; empty for none, and the feed
	// reads on the pool.
	ReadSetup() string
	// ForcePrimary is the table hint, after "table AS alias", that makes a
	// claim by primary key read the primary key's index; empty for none.
	ForcePrimary() string
	// DeleteIDs is a DELETE of the rows of table whose id is one of n
	// arguments (? markers for bun), reading them through the primary key
	// whatever the table's statistics say.
	DeleteIDs(table string, n int) string
	// ForceIndex is the table hint, after "table AS alias", that makes a
	// statement read the table through the named index, whatever the
	// table's statistics say; empty for none.
	ForceIndex(index string) string
	// PreferIndexes is the statements that make the planner, for the rest
	// of a transaction, read through an index wherever one serves the
	// query, however small the table: a plan that still scans or sorts
	// has no index that serves it. None where statements name the index
	// they read (ForceIndex).
	PreferIndexes() []string
	// Placeholder is the parameter marker for the nth argument (from 1)
	// of a statement prepared on the server; empty where bunqueue
	// prepares none (a server in the same process gains nothing from it).
	Placeholder(n int) string
	// System is the server's name as OpenTelemetry's db.system.name
	// gives it, for the spans of the statements bunqueue runs outside
	// bun.
	System() string
	// Now is the SQL of the database clock's time, in UTC, to the
	// microsecond where the server keeps it, for a time column to be
	// compared with. It is read when the statement starts, not when its
	// transaction did.
	Now() string
	// NowPlus is Now plus d, which may be negative.
	NowPlus(d time.Duration) string
	// NowMicros is the SQL of the database clock's time as a BIGINT of
	// microseconds since the Unix epoch (to the millisecond where the
	// server keeps no finer time), for the periodic jobs' records, whose
	// ticks are numbers that mean one instant whatever a driver's or a
	// session's time zone.
	NowMicros() string
	// MicrosSince is the SQL of the BIGINT of microseconds from the time
	// in column, a jobs table's time column, to Now: both on the database
	// clock, so that no app server's clock enters (to the millisecond
	// where the server keeps no finer time).
	MicrosSince(column string) string
	// Time renders t as a literal of the jobs tables' time columns.
	Time(t time.Time) string
	// Contains is the condition that column, a text column of the jobs
	// tables or, when binary, a bytes one, contains the statement's next
	// argument (a ? marker), a text of valid UTF-8 without NUL, compared
	// literally (no wildcards) with ASCII letters at least matching
	// either case; NULL where column is NULL. Each server's
	// implementation says what else it folds.
	Contains(column string, binary bool) string
	// AppendAttempt is the SQL of column, a JSON array of failed attempts
	// (NULL for none), with one more object at its end:
	// {"attempt": ?, "at_us": NowMicros, "error": ?}, the two markers the
	// attempt's number and its error. When the array holds keep objects
	// or more, its first (oldest) one is dropped, so that an array that
	// only ever grows through it holds at most keep.
	AppendAttempt(column string, keep int) string
	// SkipTakenKeys is the clause, after an INSERT's VALUES, that skips
	// the rows whose unique key is taken, where the server can skip those
	// rows and hide no other error. Where it cannot (MySQL, whose INSERT
	// IGNORE turns every error of a row into a warning) it is empty: the
	// INSERT is a plain one, which a taken key fails whole (KeyTaken).
	SkipTakenKeys() string
	// KeyTaken reports whether err is the failure of an INSERT ending in
	// SkipTakenKeys that inserted nothing because a row's key in the
	// unique index named index was taken; never where SkipTakenKeys skips
	// such rows.
	KeyTaken(err error, index string) bool
	// InsertID runs insert, a one-row INSERT ending in SkipTakenKeys into
	// a table whose key column is id, and returns the new row's id, or
	// false if the row was skipped.
	InsertID(ctx context.Context, db bun.IDB, insert string) (int64, bool, error)
	// InsertCount runs insert, an INSERT ending in SkipTakenKeys of any
	// number of rows into a table whose key column is id, and returns how
	// many rows it inserted. A statement whose reply was lost must not
	// run again by itself (see Postgres.InsertCount).
	InsertCount(ctx context.Context, db bun.IDB, insert string) (int64, error)
	// ShareLock is the clause, after a SELECT, that reads the latest
	// committed rows with a shared lock that does not wait for a claim's
	// row lock.
	ShareLock() string
	// MaxStatement returns the largest statement, in bytes, the server
	// takes.
	MaxStatement(ctx context.Context, db bun.IDB) (int, error)
	// MissingTable reports whether err says a table does not exist.
	MissingTable(err error) bool
	// MissingColumn reports whether err says a column does not exist:
	// on the jobs tables, which only bunqueue's statements name, a table
	// of an older schema version.
	MissingColumn(err error) bool
	// Lock takes the named lock on conn, waiting at most wait, for work
	// that processes must take turns at (migrations); unlock releases it.
	// Where the lock is a transaction's (PostgreSQL, SQLite), conn runs
	// that transaction until unlock, and the work done on conn under the
	// lock is part of it: an error of unlock means it was not kept.
	Lock(ctx context.Context, conn bun.Conn, name string, wait time.Duration) (unlock func() error, err error)
	// SuggestIndex derives from query, a SELECT over table (alias in the
	// query, in schema, empty for the connection's database) whose
	// primary key is pks, an index that would serve it: the columns of
	// the WHERE's equality conditions, then those of the ORDER BY, then
	// the primary key; and finds an existing index that serves it as
	// well. It reports false when it cannot derive the columns reliably.
	SuggestIndex(ctx context.Context, db bun.IDB, query, schema, table, alias string, pks []string) (Index, bool, error)
}

// For returns the Dialect of db (a *bun.DB, bun.Tx or bun.Conn), or an
// error naming the unsupported one.
func For(db interface{ Dialect() schema.Dialect }) (Dialect, error) {
	switch name := db.Dialect().Name(); name {
	case dialect.MySQL:
		return MySQL{}, nil
	case dialect.PG:
		return Postgres{}, nil
	case dialect.SQLite:
		return SQLite{}, nil
	default:
		return nil, fmt.Errorf("bunqueue: the %s dialect is not supported; use MySQL 8.0.1+ or MariaDB 10.6+ through bun's mysqldialect, PostgreSQL 12+ through pgdialect, or SQLite 3.35+ through sqlitedialect", name)
	}
}

// Locking adds to sel the lock clause for (SkipLocked or ForUpdate), if
// the server has one.
func Locking(sel *bun.SelectQuery, clause string) *bun.SelectQuery {
	if clause == "" {
		return sel
	}
	return sel.For(clause)
}

// txAnswers reports whether tx still runs statements: where a statement
// cut short by its context closes the connection, that tells whether the
// transaction is lost.
func txAnswers(ctx context.Context, tx bun.Tx) bool {
	_, err := tx.ExecContext(ctx, "SELECT 1")
	return err == nil
}

// queryStrings runs q and returns the first column of its rows.
func queryStrings(ctx context.Context, db bun.IDB, what, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// insertReturningID is InsertID where the server has RETURNING: a skipped
// row returns no row. Through bun's Scan, not QueryRowContext: bun's query
// hooks (Client.QueryHook wakes the queue) then see the statement after
// its row was read and the statement ended, which, outside a transaction,
// is after its commit (SQLite commits an INSERT … RETURNING only then).
// insert is SQL with its values in it: no placeholders are left to fill.
func insertReturningID(ctx context.Context, db bun.IDB, insert string) (int64, bool, error) {
	var id int64
	err := db.NewRaw(insert+" RETURNING id").Scan(ctx, &id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return id, true, nil
}

// insertReturningCount is InsertCount where the server has RETURNING.
func insertReturningCount(ctx context.Context, db bun.IDB, insert string) (int64, error) {
	var ids []int64
	if err := db.NewRaw(insert+" RETURNING id").Scan(ctx, &ids); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	return int64(len(ids)), nil
}

// utcLiteral renders t as a time literal in UTC, to the microsecond, with
// its offset: as bun's pgdialect and sqlitedialect render times.
func utcLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999-07:00") + "'"
}

// connOrContext reports whether err is nil or is one of the errors,
// common to every driver, of a connection, a transaction or a context:
// errors that Dialect.ClientSide never counts, whatever the server.
func connOrContext(err error) bool {
	var ne net.Error
	return err == nil ||
		errors.As(err, &ne) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, sql.ErrTxDone) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// deleteInList is DELETE … WHERE id IN (?, …) with n markers.
func deleteInList(table string, n int) string {
	return "DELETE FROM " + table + " WHERE id IN (" + strings.Repeat("?, ", n-1) + "?)"
}
