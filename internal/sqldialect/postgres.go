package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Postgres is the dialect of PostgreSQL 11+, through pgx's database/sql
// driver (github.com/jackc/pgx/v5/stdlib) or bun's pgdriver. It imports
// neither: it reads their errors through the methods they share.
type Postgres struct{}

var _ Dialect = Postgres{}

// pgNeeds says what the startup probe proves missing.
const pgNeeds = "bunqueue needs a server that skips locked rows (PostgreSQL 11+)"

// SkipLocked implements Dialect. NO KEY UPDATE is the lock an UPDATE that
// leaves the key alone takes: it lets foreign key checks and ShareLock's
// FOR KEY SHARE through, which FOR UPDATE would make wait.
func (Postgres) SkipLocked() string { return "NO KEY UPDATE SKIP LOCKED" }

// Retryable implements Dialect: 40P01 deadlock, 55P03 lock not available
// (lock_timeout), 40001 serialization failure (REPEATABLE READ and
// SERIALIZABLE only). Each aborts the whole transaction, not only its
// statement.
func (Postgres) Retryable(err error) bool {
	switch sqlState(err) {
	case "40P01", "55P03", "40001":
		return true
	}
	return false
}

// Refused implements Dialect: a server error other than a conflict, a
// connection exception (class 08) or an operator's intervention (class 57:
// a cancelled statement, a terminated session, a shutdown).
func (d Postgres) Refused(err error) bool {
	state := sqlState(err)
	return state != "" && !d.Retryable(err) && !strings.HasPrefix(state, "08") && !strings.HasPrefix(state, "57")
}

// sqlState returns the SQLSTATE of the server error in err's chain, or ""
// for none: pgx's *pgconn.PgError (and lib/pq's *pq.Error) have
// SQLState(), bun's pgdriver.Error has Field('C').
func sqlState(err error) string {
	if err == nil {
		return ""
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		return state.SQLState()
	}
	var fields interface{ Field(byte) string }
	if errors.As(err, &fields) {
		return fields.Field('C')
	}
	return ""
}

// CheckServer implements Dialect. It creates probe if it is missing
// (only then: CREATE TABLE IF NOT EXISTS needs the CREATE privilege on the
// schema even when the table exists). The table is looked up in the
// connection's search_path, as bun's unqualified names are, and created in
// its first schema.
func (d Postgres) CheckServer(ctx context.Context, db *bun.DB, probe string) error {
	exists := func() (bool, error) {
		var ok bool
		err := db.QueryRowContext(ctx, "SELECT to_regclass(?) IS NOT NULL", probe).Scan(&ok)
		return ok, err
	}
	ok, err := exists()
	if err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	if !ok {
		ddl := "CREATE TABLE IF NOT EXISTS " + probe + " (id INT NOT NULL PRIMARY KEY)"
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			// Two processes creating it at once: one of them fails with
			// a unique violation of the catalog, and finds it made.
			if ok, _ := exists(); !ok {
				return fmt.Errorf("bunqueue: create the startup probe table %s (the probe proves the server skips locked rows; grant CREATE on the schema, or create it once as an administrator: CREATE TABLE %s (id INT NOT NULL PRIMARY KEY), and grant SELECT, INSERT, UPDATE on it): %w", probe, probe, err)
			}
		}
	}
	return d.Probe(ctx, db, probe)
}

// Probe locks row 1 of table (id INT primary key, rows 1 and 2 inserted
// if missing) on one connection and asks a second for the first unlocked
// row: it must get row 2 at once.
func (d Postgres) Probe(ctx context.Context, db *bun.DB, table string) error {
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES (1), (2) ON CONFLICT DO NOTHING"); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	var version string
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	version = "PostgreSQL " + version

	return probeSkipLocked(ctx, db, skipLockedProbe{
		table:  table,
		server: version,
		needs:  pgNeeds,
		read:   "SELECT id FROM " + table + " ORDER BY id LIMIT 1 FOR " + d.SkipLocked(),
		// The server, too, bounds the wait: bun's pgdriver leaves the
		// statement running on the server when the context ends.
		prepare: "SET LOCAL lock_timeout = '" + fmt.Sprintf("%dms", probeWait.Milliseconds()) + "'",
		unknown: func(err error) bool { return sqlState(err) == "42601" }, // syntax_error
		waited:  func(err error) bool { return sqlState(err) == "55P03" }, // lock_not_available
	})
}

// regclass returns the name of the table as to_regclass reads it: quoted,
// as bun quotes it, and in the connection's search_path when schema is
// empty.
func regclass(schema, table string) string {
	if schema == "" {
		return pgSyntax.quoteIdent(table)
	}
	return pgSyntax.quoteIdent(schema) + "." + pgSyntax.quoteIdent(table)
}

// pgRelKinds names pg_class.relkind's kinds of relation that are not
// tables.
var pgRelKinds = map[string]string{
	"v": "view",
	"m": "materialized view",
	"f": "foreign table",
	"S": "sequence",
	"i": "index",
	"I": "partitioned index",
	"c": "composite type",
	"t": "TOAST table",
}

// CheckTable implements Dialect. It takes ordinary and partitioned tables,
// whose rows every PostgreSQL table locks, and refuses the rest, views
// included: even where PostgreSQL locks rows through a simple view, a view
// has no primary key for the queue to claim rows by.
func (Postgres) CheckTable(ctx context.Context, db *bun.DB, schema, table string) error {
	var kind string
	err := db.QueryRowContext(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass(?)", regclass(schema, table)).Scan(&kind)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("table %s does not exist in the database; create it before Start", table)
	case err != nil:
		return fmt.Errorf("check table %s: %w", table, err)
	case kind == "r", kind == "p":
		return nil
	}
	name, ok := pgRelKinds[kind]
	if !ok {
		name = "relation of kind " + kind
	}
	return fmt.Errorf("%s is a %s, not a table; a queue must be declared over a table", table, name)
}

// PrimaryKey implements Dialect, from pg_index.
func (Postgres) PrimaryKey(ctx context.Context, db bun.IDB, schema, table string) ([]string, error) {
	return queryStrings(ctx, db, "read the primary key of "+table, "SELECT a.attname FROM pg_index i "+
		"JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "+
		"WHERE i.indrelid = to_regclass(?) AND i.indisprimary "+
		"ORDER BY array_position(i.indkey::int2[], a.attnum)", regclass(schema, table))
}

// SessionID implements Sessions: the backend's process id.
func (Postgres) SessionID(ctx context.Context, db bun.IDB) (int64, error) {
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id); err != nil {
		return 0, err
	}
	return id, nil
}

// ClientSide implements Dialect. Besides server errors (those with an
// SQLSTATE), network and context errors, it counts every error of pgx's
// connection package (a *pgconn.ConnectError, "conn closed", a timeout…)
// as not client side: those are told apart by their package, as the
// dialect does not import pgx.
func (Postgres) ClientSide(err error) bool {
	return sqlState(err) == "" && !inChain(err, fromPgconn) && !connOrContext(err)
}

// fromPgconn reports whether err's type is declared in pgx's connection
// package (v5's, or v4's own module).
func fromPgconn(err error) bool {
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	return strings.HasPrefix(pkg, "github.com/jackc/pgx/v5/pgconn") || strings.HasPrefix(pkg, "github.com/jackc/pgconn")
}

// inChain reports whether f holds for err or an error it wraps.
func inChain(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if inChain(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// ReadSetup implements Dialect: none. PostgreSQL has no dirty reads (its
// READ UNCOMMITTED is READ COMMITTED), and an index-only scan's
// visibility check is the visibility map's, not the rows'.
func (Postgres) ReadSetup() string { return "" }

// ForcePrimary implements Dialect: none, PostgreSQL has no index hints (and
// reads a claim's few keys through the primary key without one).
func (Postgres) ForcePrimary() string { return "" }

// DeleteIDs implements Dialect: a list, which may be planned as a scan,
// but a scan tests a row's version against the conditions before it
// locks the row or waits for it.
func (Postgres) DeleteIDs(table string, n int) string { return deleteInList(table, n) }

// ForceIndex implements Dialect: none, as ForcePrimary.
func (Postgres) ForceIndex(string) string { return "" }

// Placeholder implements Dialect: $n.
func (Postgres) Placeholder(n int) string { return "$" + strconv.Itoa(n) }

// System implements Dialect.
func (Postgres) System() string { return "postgresql" }

// Now implements Dialect: statement_timestamp(), a timestamptz. now() is
// the time the transaction started: a claim's later statements would
// stamp rows with it.
func (Postgres) Now() string { return "statement_timestamp()" }

// NowMicros implements Dialect: the statement's time as epoch seconds
// (a numeric, exact to the microsecond) times a million.
func (Postgres) NowMicros() string {
	return "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000 AS BIGINT)"
}

// MicrosSince implements Dialect: the interval between two timestamptz
// values as seconds (a numeric, exact to the microsecond) times a million.
func (Postgres) MicrosSince(column string) string {
	return "CAST(EXTRACT(EPOCH FROM statement_timestamp() - " + column + ") * 1000000 AS BIGINT)"
}

// AppendAttempt implements Dialect on a jsonb column: "- 0" drops the
// first element, "||" appends the array of the new object.
func (p Postgres) AppendAttempt(column string, keep int) string {
	return fmt.Sprintf("(CASE WHEN %[1]s IS NULL THEN '[]'::jsonb WHEN jsonb_array_length(%[1]s) >= %[2]d THEN %[1]s - 0 ELSE %[1]s END) || "+
		"jsonb_build_array(jsonb_build_object('attempt', CAST(? AS INTEGER), 'at_us', %[3]s, 'error', CAST(? AS TEXT)))", column, keep, p.NowMicros())
}

// NowPlus implements Dialect. The interval literal keeps every
// microsecond, where a multiplication of an interval goes through float8.
func (Postgres) NowPlus(d time.Duration) string {
	return fmt.Sprintf("statement_timestamp() + INTERVAL '%d microseconds'", d.Microseconds())
}

// Time implements Dialect: a timestamptz literal in UTC with its offset,
// as bun's pgdialect renders times, which means the same instant whatever
// the session's TimeZone. Untyped, it takes the type of the column it is
// compared with or stored in.
func (Postgres) Time(t time.Time) string { return utcLiteral(t) }

// Contains implements Dialect. A text column and the text are
// lower-cased by lower(), which folds what the database's LC_CTYPE folds
// (every cased letter under a UTF-8 locale, ASCII alone under C), and
// found by strpos, character by character. A BYTEA column (binary, the
// args) is matched on its bytes: it and the text's UTF-8 are read as
// LATIN1, a character a byte, and translate folds ASCII letters alone,
// so that a byte of a UTF-8 sequence is never changed into another: "é"
// finds "é" only, and "É" does not find it. LATIN1 takes every byte but
// NUL, which JSON never holds raw: a value with one is not searched,
// rather than fail the statement.
func (Postgres) Contains(column string, binary bool) string {
	if binary {
		return "CASE WHEN position('\\x00'::bytea IN " + column + ") = 0 THEN strpos(" + pgASCIILower("convert_from("+column+", 'LATIN1')") + ", " +
			pgASCIILower("convert_from(convert_to(?, 'UTF8'), 'LATIN1')") + ") > 0 END"
	}
	return "strpos(lower(" + column + "), lower(?)) > 0"
}

// pgASCIILower is the SQL of the text expr with its ASCII capitals
// lower-cased, and nothing else changed.
func pgASCIILower(expr string) string {
	return "translate(" + expr + ", 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
}

// SkipTakenKeys implements Dialect. ON CONFLICT DO NOTHING skips a row
// whose unique key is taken, and only that: other errors stay errors.
func (Postgres) SkipTakenKeys() string { return " ON CONFLICT DO NOTHING" }

// KeyTaken implements Dialect: never, ON CONFLICT DO NOTHING skips the row.
func (Postgres) KeyTaken(error, string) bool { return false }

// InsertCount implements Dialect with RETURNING id, a query. Not an
// Exec: pgx sends a statement without arguments by the simple protocol,
// and when the reply of an Exec is lost it reports the connection as bad
// and safe to retry, so database/sql runs the INSERT again, on another
// connection, after the server may have committed it: the jobs would be
// there twice.
func (Postgres) InsertCount(ctx context.Context, db bun.IDB, insert string) (int64, error) {
	return insertReturningCount(ctx, db, insert)
}

// InsertID implements Dialect with RETURNING id: neither PostgreSQL driver
// implements LastInsertId. A skipped row returns no row.
func (Postgres) InsertID(ctx context.Context, db bun.IDB, insert string) (int64, bool, error) {
	return insertReturningID(ctx, db, insert)
}

// ShareLock implements Dialect. FOR KEY SHARE reads the latest committed
// row version in READ COMMITTED, and does not wait for a claim's FOR NO
// KEY UPDATE (FOR SHARE would).
func (Postgres) ShareLock() string { return "FOR KEY SHARE" }

// pgMaxStatement is MaxStatement. PostgreSQL has no setting for it: a
// statement is one protocol message, which may reach 1 GB, but the server
// holds it, and its parse tree, in memory several times over; batches of
// 64 MiB keep that to a sane size.
const pgMaxStatement = 64 << 20

// MaxStatement implements Dialect: a constant, pgMaxStatement.
func (Postgres) MaxStatement(context.Context, bun.IDB) (int, error) { return pgMaxStatement, nil }

// MissingTable implements Dialect: 42P01 undefined table, and 3F000
// invalid schema name, which a table qualified with a missing schema
// gives.
func (Postgres) MissingTable(err error) bool {
	switch sqlState(err) {
	case "42P01", "3F000":
		return true
	}
	return false
}

// MissingColumn implements Dialect: undefined_column.
func (Postgres) MissingColumn(err error) bool { return sqlState(err) == "42703" }

// LockKey returns the key of the advisory lock Lock takes for name: the
// 64-bit FNV-1a hash of the name, the same in every process and on every
// server version.
func (Postgres) LockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// Lock implements Dialect with a transaction-level advisory lock: conn
// begins a transaction, READ COMMITTED (after the wait, the work must see
// what the previous holder committed), takes pg_advisory_xact_lock,
// waiting at most wait (SET LOCAL lock_timeout; with wait zero or less it
// does not wait), and keeps the transaction until unlock commits it. The
// lock, its lock_timeout (which bounds the lock waits of the work too)
// and the work run on one server session, even through a pooler in
// transaction mode, and nothing of them is left on the session after the
// transaction; a session-level lock, there, would stay with a server
// session that other clients get, and its unlock might run on another.
func (d Postgres) Lock(ctx context.Context, conn bun.Conn, name string, wait time.Duration) (func() error, error) {
	key := d.LockKey(name)
	if _, err := conn.ExecContext(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED"); err != nil {
		return nil, fmt.Errorf("take the lock %q: %w", name, err)
	}
	end := func(stmt string) error {
		// A transaction that cannot be ended ends with its connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := conn.ExecContext(rctx, stmt)
		return err
	}
	got, err := xactLock(ctx, conn, key, wait)
	if err != nil || !got {
		_ = end("ROLLBACK")
		if err != nil {
			return nil, fmt.Errorf("take the lock %q: %w", name, err)
		}
		return nil, fmt.Errorf("another process held the lock %q (advisory lock %d) for %s", name, key, wait)
	}
	return func() error {
		if err := end("COMMIT"); err != nil {
			_ = end("ROLLBACK")
			return fmt.Errorf("commit the work done under the lock %q: %w", name, err)
		}
		return nil
	}, nil
}

// xactLock takes the transaction-level advisory lock key in conn's
// transaction, waiting at most wait, and reports whether it got it.
func xactLock(ctx context.Context, conn bun.Conn, key int64, wait time.Duration) (bool, error) {
	if wait <= 0 {
		var got bool
		err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock(?)", key).Scan(&got)
		return got, err
	}
	ms := min(max(wait.Milliseconds(), 1), 1<<31-1) // lock_timeout is an int of milliseconds
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", ms)); err != nil {
		return false, err
	}
	_, err := conn.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", key)
	if sqlState(err) == "55P03" {
		return false, nil
	}
	return err == nil, err
}

// ForUpdate implements Dialect: NO KEY UPDATE, which lets the shared
// lock of ShareLock (FOR KEY SHARE) and foreign key checks through.
func (Postgres) ForUpdate() string { return "NO KEY UPDATE" }

// TxLost implements Dialect: a statement cut short by its context makes
// the driver close the connection.
func (Postgres) TxLost(ctx context.Context, tx bun.Tx) bool { return !txAnswers(ctx, tx) }

// PreferIndexes implements Dialect.
func (Postgres) PreferIndexes() []string {
	return []string{"SET LOCAL enable_sort = off", "SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off",
		"SET LOCAL random_page_cost = 1.1"}
}
