package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
)

// MySQL is the dialect of MySQL 8.0.1+ and MariaDB 10.6+.
type MySQL struct{}

// probeWait bounds how long the second connection may wait for its row;
// probeTimeout bounds the whole probe, connections included.
const (
	probeWait    = 3 * time.Second
	probeTimeout = 15 * time.Second
)

// SkipLocked implements Dialect.
func (MySQL) SkipLocked() string { return "UPDATE SKIP LOCKED" }

// Retryable implements Dialect: 1213 deadlock, 1205 lock wait timeout,
// 1020 record changed since last read (MariaDB 11.6+ under REPEATABLE READ).
func (MySQL) Retryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205, 1020:
			return true
		}
	}
	return false
}

// Refused implements Dialect: a server error other than a conflict, a
// KILL of the statement (1317) or of the session (1927), or a shutdown
// (1053).
func (d MySQL) Refused(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || d.Retryable(err) {
		return false
	}
	switch me.Number {
	case 1317, 1927, 1053:
		return false
	}
	return true
}

// CheckServer implements Dialect. It creates probe if it is missing
// (only then: CREATE TABLE IF NOT EXISTS needs the CREATE privilege even
// when the table exists).
func (d MySQL) CheckServer(ctx context.Context, db *bun.DB, probe string) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", probe).Scan(&n); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+probe+
			" (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB"); err != nil {
			return fmt.Errorf("bunqueue: create the startup probe table %s (the probe proves the server skips locked rows; grant CREATE, or create it once as an administrator: CREATE TABLE %s (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB): %w", probe, probe, err)
		}
	}
	return d.Probe(ctx, db, probe)
}

// Probe locks row 1 of table (id INT primary key, rows 1 and 2 inserted
// if missing) on one connection and asks a second for the first unlocked
// row: it must get row 2 at once.
func (MySQL) Probe(ctx context.Context, db *bun.DB, table string) error {
	if _, err := db.ExecContext(ctx, "INSERT IGNORE INTO "+table+" (id) VALUES (1), (2)"); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	return probeSkipLocked(ctx, db, skipLockedProbe{
		table:   table,
		server:  version,
		needs:   "bunqueue needs a server that skips locked rows (MySQL 8.0.1+ or MariaDB 10.6+, InnoDB tables)",
		read:    "SELECT id FROM " + table + " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
		unknown: func(err error) bool { var me *mysql.MySQLError; return errors.As(err, &me) && me.Number == 1064 },
	})
}

// CheckTable implements Dialect.
func (MySQL) CheckTable(ctx context.Context, db *bun.DB, schema, table string) error {
	q := "SELECT COALESCE(ENGINE, ''), TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
	args := []any{table}
	if schema != "" {
		q = strings.Replace(q, "DATABASE()", "?", 1)
		args = []any{schema, table}
	}
	var engine, typ string
	err := db.QueryRowContext(ctx, q, args...).Scan(&engine, &typ)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("table %s does not exist in the database; create it before Start", table)
	case err != nil:
		return fmt.Errorf("check table %s: %w", table, err)
	case typ != "BASE TABLE":
		return fmt.Errorf("%s is a %s, not a table; a queue must be declared over an InnoDB table", table, strings.ToLower(typ))
	case !strings.EqualFold(engine, "InnoDB"):
		return fmt.Errorf("table %s uses the %s engine, which ignores row locks and SKIP LOCKED; convert it with ALTER TABLE %s ENGINE=InnoDB", table, engine, table)
	}
	return nil
}

// PrimaryKey implements Dialect.
func (MySQL) PrimaryKey(ctx context.Context, db bun.IDB, schema, table string) ([]string, error) {
	q := "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX"
	args := []any{table}
	if schema != "" {
		q = strings.Replace(q, "DATABASE()", "?", 1)
		args = []any{schema, table}
	}
	return queryStrings(ctx, db, "read the primary key of "+table, q, args...)
}

// SessionID implements Dialect: CONNECTION_ID().
func (MySQL) SessionID(ctx context.Context, db bun.IDB) (int64, error) {
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return 0, err
	}
	return id, nil
}

// ClientSide implements Dialect.
func (MySQL) ClientSide(err error) bool {
	var me *mysql.MySQLError
	return !errors.As(err, &me) && !errors.Is(err, mysql.ErrInvalidConn) && !connOrContext(err)
}

// ForUpdate implements Dialect.
func (MySQL) ForUpdate() string { return "UPDATE" }

// TxLost implements Dialect: a statement cut short by its context makes
// the driver close the connection.
func (MySQL) TxLost(ctx context.Context, tx bun.Tx) bool { return !txAnswers(ctx, tx) }

// SessionSetup implements Dialect.
func (MySQL) SessionSetup() string {
	return "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
}

// ReadSetup implements Dialect: READ UNCOMMITTED. A READ COMMITTED read
// of a secondary index whose pages changed after its snapshot began (the
// queue's index, always, under load) must look up each entry's row in the
// clustered index to see which version is visible: on MariaDB 10.11,
// during a run of batch claims, 6,500 to 10,000 pages for 3,200 keys. A
// READ UNCOMMITTED read takes the entries as they are: 20 to 50 pages.
// The keys it returns may belong to changes not yet committed; each claim
// locks its rows and checks them against the query again, and skips a
// row another transaction holds.
func (MySQL) ReadSetup() string {
	return "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"
}

// ForcePrimary implements Dialect.
func (MySQL) ForcePrimary() string { return "FORCE INDEX (PRIMARY)" }

// DeleteIDs implements Dialect: a join of the ids, as a derived table
// read first, to the table by its primary key, one row at a time
// (eq_ref). DELETE … WHERE id IN (…) is planned as a scan when the
// statistics say the table is small, and InnoDB locks, and waits for,
// every row a DELETE reads; single-table DELETE takes no index hint, and
// MariaDB drops the hint of a one-table multi-table DELETE.
func (MySQL) DeleteIDs(table string, n int) string {
	var b strings.Builder
	b.WriteString("DELETE t FROM (SELECT ? AS id")
	for range n - 1 {
		b.WriteString(" UNION ALL SELECT ?")
	}
	b.WriteString(") AS k STRAIGHT_JOIN " + table + " AS t FORCE INDEX (PRIMARY) ON t.id = k.id")
	return b.String()
}

// ForceIndex implements Dialect.
func (MySQL) ForceIndex(index string) string { return "FORCE INDEX (" + index + ")" }

// Placeholder implements Dialect.
func (MySQL) Placeholder(int) string { return "?" }

// System implements Dialect: mysql, for MariaDB too (one dialect serves
// both).
func (MySQL) System() string { return "mysql" }

// Now implements Dialect: UTC_TIMESTAMP(6), which needs no time zone
// tables and ignores the session's time_zone.
func (MySQL) Now() string { return "UTC_TIMESTAMP(6)" }

// NowMicros implements Dialect: the difference of UTC_TIMESTAMP(6)
// from the epoch, both wall times in UTC, so no session time_zone enters.
func (MySQL) NowMicros() string {
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
}

// MicrosSince implements Dialect: both DATETIME(6) wall times in UTC.
func (MySQL) MicrosSince(column string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + column + ", UTC_TIMESTAMP(6))"
}

// AppendAttempt implements Dialect with the JSON functions that MySQL
// 8.0 and MariaDB share; the column is text, which they parse.
func (m MySQL) AppendAttempt(column string, keep int) string {
	return fmt.Sprintf("JSON_ARRAY_APPEND(CASE WHEN %[1]s IS NULL THEN JSON_ARRAY() WHEN JSON_LENGTH(%[1]s) >= %[2]d THEN JSON_REMOVE(%[1]s, '$[0]') ELSE %[1]s END, "+
		"'$', JSON_OBJECT('attempt', ?, 'at_us', %[3]s, 'error', ?))", column, keep, m.NowMicros())
}

// NowPlus implements Dialect.
func (MySQL) NowPlus(d time.Duration) string {
	return fmt.Sprintf("UTC_TIMESTAMP(6) + INTERVAL %d MICROSECOND", d.Microseconds())
}

// Time implements Dialect: a DATETIME(6) literal in UTC, formatted here
// because bun's mysqldialect may be set to convert times to another
// location.
func (MySQL) Time(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "'"
}

// Contains implements Dialect: column and the text, as utf8mb4 (bytes of
// a BLOB that are not UTF-8 become '?'), lower-cased by LOWER with the
// case mapping of utf8mb4 (every cased letter, not only ASCII), and
// found by LOCATE under utf8mb4_bin: code point by code point, so that
// neither accents nor the server's default collation enter ("e" does not
// find "é").
func (MySQL) Contains(column string, _ bool) string {
	return "LOCATE(LOWER(CONVERT(? USING utf8mb4)) COLLATE utf8mb4_bin, LOWER(CONVERT(" + column + " USING utf8mb4)) COLLATE utf8mb4_bin) > 0"
}

// SkipTakenKeys implements Dialect: none, the INSERT is a plain one.
// IGNORE would turn every error of a row into a warning, not only a
// duplicate key (a time out of range stored as 0000-00-00, a number
// clamped), and ON DUPLICATE KEY UPDATE locks the row that holds the key,
// so it would wait for a running job's claim. A taken key fails the
// statement (KeyTaken), and only the statement: a transaction goes on.
func (MySQL) SkipTakenKeys() string { return "" }

// KeyTaken implements Dialect: error 1062 on the index, which MariaDB
// names 'index' and MySQL 8 'table.index' at the end of the message.
func (MySQL) KeyTaken(err error, index string) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062 &&
		(strings.HasSuffix(me.Message, "'"+index+"'") || strings.HasSuffix(me.Message, "."+index+"'"))
}

// InsertCount implements Dialect: Exec and RowsAffected.
func (MySQL) InsertCount(ctx context.Context, db bun.IDB, insert string) (int64, error) {
	r, err := db.ExecContext(ctx, insert)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// InsertID implements Dialect.
func (MySQL) InsertID(ctx context.Context, db bun.IDB, insert string) (int64, bool, error) {
	r, err := db.ExecContext(ctx, insert)
	if err != nil {
		return 0, false, err
	}
	n, err := r.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	id, err := r.LastInsertId()
	return id, err == nil, err
}

// ShareLock implements Dialect. The shared lock on the unique index entry
// makes the read see the latest committed row whatever the transaction's
// snapshot; it does not wait for a claim's lock on the row.
func (MySQL) ShareLock() string { return "LOCK IN SHARE MODE" }

// MaxStatement implements Dialect: max_allowed_packet.
func (MySQL) MaxStatement(ctx context.Context, db bun.IDB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&n); err != nil {
		return 0, fmt.Errorf("read max_allowed_packet: %w", err)
	}
	return n, nil
}

// MissingTable implements Dialect: error 1146.
func (MySQL) MissingTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// MissingColumn implements Dialect: ER_BAD_FIELD_ERROR, "Unknown column".
func (MySQL) MissingColumn(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1054
}

// Lock implements Dialect with GET_LOCK, which belongs to conn's session.
func (MySQL) Lock(ctx context.Context, conn bun.Conn, name string, wait time.Duration) (func() error, error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, int(wait.Seconds())).Scan(&got); err != nil {
		return nil, fmt.Errorf("take the lock %q: %w", name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("another process held the lock %q for %s", name, wait)
	}
	return func() error {
		// A lock that cannot be released ends with its connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(rctx, "SELECT RELEASE_LOCK(?)", name)
		return nil
	}, nil
}

// PreferIndexes implements Dialect.
func (MySQL) PreferIndexes() []string { return nil }
