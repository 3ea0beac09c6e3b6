package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// SQLite is the dialect of SQLite 3.35+ through bun's sqlitedialect and a
// database/sql driver, tested with modernc.org/sqlite (pure Go). It
// imports no driver: it reads SQLite's result codes through the Code()
// method of the driver's error (modernc's *sqlite.Error has it).
//
// SQLite has no row locks: one connection at a time writes to the
// database, from the start of its transaction (BEGIN IMMEDIATE) to its
// end. The pool must be opened with a DSN that says so, and that waits
// for the lock instead of failing at once (see CheckServer):
//
//	file:PATH?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate
//
// In lock mode a claim's transaction holds the database's write lock for
// as long as its handlers run: the other workers, the application's
// writes and Enqueue wait for it (at most busy_timeout, then fail with
// SQLITE_BUSY, which is retried). Lease mode holds the lock only while it
// claims, extends and finishes jobs.
type SQLite struct{}

var _ Dialect = SQLite{}

// SQLiteDSN is the DSN (modernc.org/sqlite's) that CheckServer asks for,
// with PATH for the database file.
const SQLiteDSN = "file:PATH?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"

// slNeeds says what a pool opened with another DSN lacks.
const slNeeds = "bunqueue needs a file database in WAL mode, with a busy timeout, whose transactions take the write lock when they begin; with modernc.org/sqlite open it as " + SQLiteDSN

// SQLite result codes (the primary code is the low byte of an extended one).
const (
	sqliteError  = 1 // SQLITE_ERROR: a generic error, "no such table" among them
	sqliteBusy   = 5 // SQLITE_BUSY: another connection holds the lock
	sqliteLocked = 6 // SQLITE_LOCKED: a conflict within the same connection or shared cache
)

// sqliteCode returns the SQLite result code (extended, where the driver
// gives it) of the first error in err's chain that has one, and whether
// there is one.
func sqliteCode(err error) (int, bool) {
	if err == nil {
		return 0, false
	}
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code(), true
	}
	return 0, false
}

// sqliteBusyErr reports whether err is SQLITE_BUSY or one of its extended
// codes (SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY, SQLITE_BUSY_TIMEOUT).
func sqliteBusyErr(err error) bool {
	code, ok := sqliteCode(err)
	return ok && code&0xff == sqliteBusy
}

// SkipLocked implements Dialect: none, SQLite has no row locks. A claim's
// transaction holds the write lock of the whole database, so no other
// transaction can claim the same rows until it ends.
func (SQLite) SkipLocked() string { return "" }

// ForUpdate implements Dialect: none, for the same reason as SkipLocked.
func (SQLite) ForUpdate() string { return "" }

// TxLost implements Dialect: always true. When a context ends during a
// statement, the driver interrupts it (sqlite3_interrupt), and an
// interrupted write rolls back the whole transaction without a word: the
// connection is then in autocommit mode, answers SELECT 1, and would
// commit each later statement on its own. Nothing tells that apart from a
// transaction that survived, so the transaction is never reused.
func (SQLite) TxLost(context.Context, bun.Tx) bool { return true }

// Retryable implements Dialect: SQLITE_BUSY (5, and its extended codes,
// such as 517 SQLITE_BUSY_SNAPSHOT), another connection held the lock
// past busy_timeout; SQLITE_LOCKED (6, and its extended codes), a
// conflict within a shared cache.
func (SQLite) Retryable(err error) bool {
	code, ok := sqliteCode(err)
	if !ok {
		return false
	}
	switch code & 0xff {
	case sqliteBusy, sqliteLocked:
		return true
	}
	return false
}

// CheckServer implements Dialect. SQLite has no row locks to skip: the
// probe proves instead that the pool works as a queue needs. The database
// must be a file in WAL mode (readers then do not wait for the writer),
// with a busy_timeout (a writer waits for the lock instead of failing at
// once), and BeginTx must take the write lock when the transaction
// begins (BEGIN IMMEDIATE): a transaction that begins DEFERRED, reads,
// then writes fails with SQLITE_BUSY whenever another one wrote in
// between, whatever busy_timeout says. The last is proved with two
// connections: while one holds a transaction begun by BeginTx, a second,
// with its busy_timeout set to 0 for the moment, must fail to begin one.
func (SQLite) CheckServer(ctx context.Context, db *bun.DB, _ string) error {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	if !sqliteAtLeast(version, 3, 35) {
		return fmt.Errorf("bunqueue: SQLite %s is too old: bunqueue needs SQLite 3.35+ (RETURNING)", version)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("bunqueue: the SQLite database is in journal mode %q, not WAL; %s", mode, slNeeds)
	}
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	if busy <= 0 {
		return fmt.Errorf("bunqueue: the SQLite connection has no busy_timeout: a writer would fail at once instead of waiting for the lock; %s", slNeeds)
	}

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	failed := func(err error) error {
		if pctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("bunqueue: startup probe: no connection or no write lock within %s (is the connection pool busy, or another connection writing?): %w", probeTimeout, err)
		}
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	// The second connection first, so that BeginTx takes another one.
	conn, err := db.Conn(pctx)
	if err != nil {
		return failed(err)
	}
	defer conn.Close()
	holder, err := db.BeginTx(pctx, nil)
	if err != nil {
		return failed(err)
	}
	defer func() { _ = holder.Rollback() }()

	if _, err := conn.ExecContext(pctx, "PRAGMA busy_timeout = 0"); err != nil {
		return failed(err)
	}
	other, err := conn.BeginTx(pctx, nil)
	if err == nil {
		_ = other.Rollback()
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if _, rerr := conn.ExecContext(rctx, "PRAGMA busy_timeout = "+strconv.Itoa(busy)); rerr != nil {
		// Out of the pool, rather than back in it without a timeout.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return failed(rerr)
	}
	switch {
	case err == nil:
		return fmt.Errorf("bunqueue: BeginTx began a transaction while another held the write lock: the SQLite pool begins transactions DEFERRED, and they would fail with SQLITE_BUSY when they write; %s", slNeeds)
	case sqliteBusyErr(err):
		return nil
	}
	return failed(err)
}

// sqliteAtLeast reports whether version ("3.50.4") is major.minor or
// later.
func sqliteAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// slSchema returns the prefix that qualifies a catalog table with schema,
// an attached database's name: empty for the main database.
func slSchema(schema string) string {
	if schema == "" {
		return ""
	}
	return sqliteSyntax.quoteIdent(schema) + "."
}

// CheckTable implements Dialect, from sqlite_schema. Every SQLite table
// serves: the write lock is the database's, whatever the table. A view
// is refused: it has no primary key for the queue to claim rows by.
func (SQLite) CheckTable(ctx context.Context, db *bun.DB, schema, table string) error {
	var typ string
	err := db.QueryRowContext(ctx, "SELECT type FROM "+slSchema(schema)+"sqlite_schema WHERE name = ? COLLATE NOCASE AND type IN ('table', 'view')", table).Scan(&typ)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("table %s does not exist in the database; create it before Start", table)
	case err != nil:
		return fmt.Errorf("check table %s: %w", table, err)
	case typ != "table":
		return fmt.Errorf("%s is a %s, not a table; a queue must be declared over a table", table, typ)
	}
	return nil
}

// PrimaryKey implements Dialect, from pragma_table_info. A table without
// a declared primary key (a rowid table) has none.
func (SQLite) PrimaryKey(ctx context.Context, db bun.IDB, schema, table string) ([]string, error) {
	q := "SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk"
	args := []any{table}
	if schema != "" {
		q = "SELECT name FROM pragma_table_info(?, ?) WHERE pk > 0 ORDER BY pk"
		args = []any{table, schema}
	}
	return queryStrings(ctx, db, "read the primary key of "+table, q, args...)
}

// SessionID implements Sessions: 0, none. The database runs in this
// process, and the driver interrupts a statement when its context ends:
// there is no session left running to end from another connection.
func (SQLite) SessionID(context.Context, bun.IDB) (int64, error) { return 0, nil }

// TxSession implements Sessions: none (see SessionID).
func (SQLite) TxSession(context.Context, bun.IDB) (TxSession, error) { return TxSession{}, nil }

// EndTxSession implements Sessions: nothing to do (see SessionID).
func (SQLite) EndTxSession(context.Context, bun.IDB, TxSession) error { return nil }

// CheckEndTxSession implements Sessions: nothing to end (see SessionID).
func (SQLite) CheckEndTxSession(context.Context, *bun.DB) error { return nil }

// TxOptions implements Sessions: nil, the driver's default; SQLite has no
// isolation levels to choose (see SessionSetup).
func (SQLite) TxOptions() *sql.TxOptions { return nil }

// StatementLost implements Sessions: never; no pooler stands between the
// process and its database, and bunqueue prepares nothing on SQLite.
func (SQLite) StatementLost(error) bool { return false }

// PreparedKept implements Sessions: true, the database has no sessions
// to lose them.
func (SQLite) PreparedKept(context.Context, *bun.DB) (bool, error) { return true, nil }

// Advise implements Sessions: err as it is.
func (SQLite) Advise(err error) error { return err }

// ClientSide implements Dialect. SQLite runs in the process, but its errors
// (those with a result code) are the database's, as are the driver's
// connection errors and a cancelled context's.
func (SQLite) ClientSide(err error) bool {
	_, coded := sqliteCode(err)
	return !coded && !connOrContext(err)
}

// SessionSetup implements Dialect: none. SQLite has no isolation levels
// to choose: a transaction reads a snapshot, and a writing one (begun
// IMMEDIATE) holds the write lock, so nothing commits under it.
func (SQLite) SessionSetup() string { return "" }

// ReadSetup implements Dialect: none; a read sees the last commit.
func (SQLite) ReadSetup() string { return "" }

// ForcePrimary implements Dialect: none. INDEXED BY needs an index's
// name, and SQLite reads rows by rowid, or the primary key's index, for
// a claim's few keys without a hint.
func (SQLite) ForcePrimary() string { return "" }

// DeleteIDs implements Dialect: a list; one writer at a time, no row
// locks to wait for.
func (SQLite) DeleteIDs(table string, n int) string { return deleteInList(table, n) }

// ForceIndex implements Dialect: none. One writer at a time takes no row
// locks that a scan could wait for.
func (SQLite) ForceIndex(string) string { return "" }

// Placeholder implements Dialect: none, SQLite runs in the process.
// Refused implements Dialect: SQLite prepares nothing for bunqueue.
func (SQLite) Refused(error) bool { return false }

func (SQLite) Placeholder(int) string { return "" }

// System implements Dialect.
func (SQLite) System() string { return "sqlite" }

// slNow is SQLite's clock as the jobs tables store times: TEXT in UTC
// with an offset, as bun's sqlitedialect writes time.Time, to the
// millisecond (SQLite's clock has no finer resolution). Such strings sort
// as the times they stand for.
const slNow = "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')"

// Now implements Dialect: strftime with 'now', which SQLite reads once
// per statement, to the millisecond.
func (SQLite) Now() string { return slNow }

// NowMicros implements Dialect: SQLite keeps its clock in
// milliseconds, and julianday gives it as days; rounded to the
// millisecond, then microseconds.
func (SQLite) NowMicros() string {
	return "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) * 1000"
}

// MicrosSince implements Dialect: julianday reads the stored text, with
// its offset, as Now's 'now' is read; the difference in days, rounded to
// the millisecond, then microseconds.
func (SQLite) MicrosSince(column string) string {
	return "CAST(ROUND((julianday('now') - julianday(" + column + ")) * 86400000) AS INTEGER) * 1000"
}

// AppendAttempt implements Dialect with json1's functions on a text
// column: '$[#]' is the place after the array's last element.
func (l SQLite) AppendAttempt(column string, keep int) string {
	return fmt.Sprintf("json_insert(CASE WHEN %[1]s IS NULL THEN '[]' WHEN json_array_length(%[1]s) >= %[2]d THEN json_remove(%[1]s, '$[0]') ELSE %[1]s END, "+
		"'$[#]', json_object('attempt', ?, 'at_us', %[3]s, 'error', ?))", column, keep, l.NowMicros())
}

// NowPlus implements Dialect with a seconds modifier written in Go, to
// the microsecond (SQLite has no microseconds modifier, and rounds to
// the millisecond).
func (SQLite) NowPlus(d time.Duration) string {
	us := d.Microseconds()
	sign := "+"
	if us < 0 {
		sign, us = "-", -us
	}
	return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f+00:00', 'now', '%s%d.%06d seconds')", sign, us/1e6, us%1e6)
}

// Time implements Dialect: the literal bun's sqlitedialect writes for a
// time.Time, in UTC with its offset, to the microsecond, which compares
// as text with the stored times and with Now.
func (SQLite) Time(t time.Time) string { return utcLiteral(t) }

// Contains implements Dialect: column (a BLOB read as its UTF-8 text)
// and the text, lower-cased by lower(), which folds ASCII letters alone
// (without the ICU extension), found by instr.
func (SQLite) Contains(column string, _ bool) string {
	return "instr(lower(CAST(" + column + " AS TEXT)), lower(?)) > 0"
}

// SkipTakenKeys implements Dialect. ON CONFLICT DO NOTHING skips a row
// whose unique key is taken, and only that (INSERT OR IGNORE would skip
// NOT NULL and CHECK failures too).
func (SQLite) SkipTakenKeys() string { return " ON CONFLICT DO NOTHING" }

// KeyTaken implements Dialect: never, ON CONFLICT DO NOTHING skips the row.
func (SQLite) KeyTaken(error, string) bool { return false }

// InsertCount implements Dialect with RETURNING id, as PostgreSQL's.
func (SQLite) InsertCount(ctx context.Context, db bun.IDB, insert string) (int64, error) {
	return insertReturningCount(ctx, db, insert)
}

// InsertID implements Dialect with RETURNING id: after a skipped row,
// LastInsertId still gives the previous insert's id. A skipped row
// returns no row.
func (SQLite) InsertID(ctx context.Context, db bun.IDB, insert string) (int64, bool, error) {
	return insertReturningID(ctx, db, insert)
}

// ShareLock implements Dialect: none. A writing transaction holds the
// database's write lock, so the latest committed row is the one it reads.
func (SQLite) ShareLock() string { return "" }

// slMaxStatement is MaxStatement: SQLite takes statements up to
// SQLITE_MAX_SQL_LENGTH (1,000,000,000 bytes in modernc.org/sqlite's
// build), but holds them, and their parse, in memory: batches of 64 MiB
// keep that sane.
const slMaxStatement = 64 << 20

// MaxStatement implements Dialect: a constant, slMaxStatement.
func (SQLite) MaxStatement(context.Context, bun.IDB) (int, error) { return slMaxStatement, nil }

// MissingTable implements Dialect: SQLITE_ERROR with "no such table",
// which has no code of its own.
func (SQLite) MissingTable(err error) bool {
	code, ok := sqliteCode(err)
	return ok && code&0xff == sqliteError && strings.Contains(err.Error(), "no such table")
}

// MissingColumn implements Dialect: SQLite says so only in its message.
func (SQLite) MissingColumn(err error) bool {
	code, ok := sqliteCode(err)
	return ok && code&0xff == sqliteError && strings.Contains(err.Error(), "no such column")
}

// slLockRetry is how long Lock sleeps between attempts to begin.
const slLockRetry = 50 * time.Millisecond

// Lock implements Dialect with a transaction begun IMMEDIATE on conn, and
// held: SQLite has no named locks, but one writer at a time, so the
// transaction takes the turn of every process on the database, whatever
// the name. The statements conn runs until unlock (migrations' DDL,
// which SQLite runs in transactions) are part of it; unlock commits it,
// or rolls it back if the commit fails. Each attempt to begin waits for
// the connection's busy_timeout; Lock tries again until wait has passed
// (once, with wait zero or less).
func (SQLite) Lock(ctx context.Context, conn bun.Conn, name string, wait time.Duration) (func() error, error) {
	deadline := time.Now().Add(wait)
	for {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil {
			break
		}
		if !sqliteBusyErr(err) {
			return nil, fmt.Errorf("take the lock %q (BEGIN IMMEDIATE): %w", name, err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("another connection held the database's write lock, which stands for the lock %q, for %s", name, wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("take the lock %q: %w", name, ctx.Err())
		case <-time.After(slLockRetry):
		}
	}
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(rctx, "COMMIT"); err != nil {
			_, _ = conn.ExecContext(rctx, "ROLLBACK")
			return fmt.Errorf("commit the work done under the lock %q: %w", name, err)
		}
		return nil
	}, nil
}

// PreferIndexes implements Dialect.
func (SQLite) PreferIndexes() []string { return nil }
