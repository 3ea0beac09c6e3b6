// Package dbtest opens the real test database for the package tests.
//
// BUNQUEUE_TEST_SERVER chooses the server: mysql (the default: MySQL or
// MariaDB at BUNQUEUE_MYSQL_DSN) or postgres (PostgreSQL at
// BUNQUEUE_PG_DSN). Open, OpenSession, OpenDSN, OpenDB and Scratch open it;
// Exec translates the MySQL DDL of CREATE TABLE for it (DDL); OnlyMySQL and
// SkipOn skip what cannot run there.
package dbtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"
)

// DefaultDSN is used when BUNQUEUE_MYSQL_DSN is not set.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"

// DSN returns the MySQL/MariaDB DSN the tests use.
func DSN() string {
	if dsn := os.Getenv("BUNQUEUE_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return DefaultDSN
}

// ServerEnv names the environment variable that chooses the server the
// tests run on: "mysql" (the default, MySQL or MariaDB) or "postgres".
const ServerEnv = "BUNQUEUE_TEST_SERVER"

// ServerName names the server the tests run on, from BUNQUEUE_TEST_SERVER:
// "mysql" (the default) or "postgres". It panics on any other value.
func ServerName() string {
	switch s := strings.ToLower(os.Getenv(ServerEnv)); s {
	case "", "mysql", "mariadb":
		return "mysql"
	case "postgres", "postgresql", "pg":
		return "postgres"
	default:
		panic(fmt.Sprintf("dbtest: %s=%q: want mysql or postgres", ServerEnv, s))
	}
}

// IsPostgres reports whether the tests run on PostgreSQL.
func IsPostgres() bool { return ServerName() == "postgres" }

// Open returns a *bun.DB on the server the tests run on (see ServerName),
// with its own connection pool of at most maxConns connections
// (0: unlimited), closed when the test ends.
func Open(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	if IsPostgres() {
		return OpenPG(t, maxConns)
	}
	return OpenMySQL(t, maxConns)
}

// SkipOn skips the test, with the reason why, when it runs on server.
func SkipOn(t testing.TB, server, why string) {
	t.Helper()
	if ServerName() == server {
		t.Skipf("not on %s: %s", server, why)
	}
}

// OnlyMySQL skips the test, with the reason why, unless it runs on MySQL
// or MariaDB.
func OnlyMySQL(t testing.TB, why string) {
	t.Helper()
	if ServerName() != "mysql" {
		t.Skipf("MySQL only: %s", why)
	}
}

// Sleep returns the SQL of a statement that sleeps for the given seconds
// on the server the tests run on.
func Sleep(seconds int) string {
	if IsPostgres() {
		return fmt.Sprintf("SELECT pg_sleep(%d)", seconds)
	}
	return fmt.Sprintf("SELECT SLEEP(%d)", seconds)
}

// ServerDSN returns the DSN of the server the tests run on (see
// ServerName): PGDSN on PostgreSQL, else DSN.
func ServerDSN() string {
	if IsPostgres() {
		return PGDSN()
	}
	return DSN()
}

// OpenMySQL is Open for MySQL or MariaDB, whatever the server chosen.
func OpenMySQL(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("mysql", DSN())
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	db := bun.NewDB(sqldb, mysqldialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping(), "the tests need MySQL 8 or MariaDB 10.6+ at BUNQUEUE_MYSQL_DSN (default %s)", DefaultDSN)
	return db
}

// DefaultPGDSN is used when BUNQUEUE_PG_DSN is not set.
const DefaultPGDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PGDSN returns the PostgreSQL DSN the tests use.
func PGDSN() string {
	if dsn := os.Getenv("BUNQUEUE_PG_DSN"); dsn != "" {
		return dsn
	}
	return DefaultPGDSN
}

// OpenPG is Open for PostgreSQL, through pgx's database/sql driver.
func OpenPG(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("pgx", PGDSN())
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping(), "the tests need PostgreSQL 12+ at BUNQUEUE_PG_DSN (default %s)", DefaultPGDSN)
	return db
}

// Server is a database server the cross-server tests run on.
type Server struct {
	Name string // "mysql" or "postgres"
	// Open opens a pool of at most maxConns connections (0: unlimited),
	// closed when the test ends.
	Open func(t testing.TB, maxConns int) *bun.DB
	// Sleep is the SQL of a statement that sleeps for the given seconds.
	Sleep func(seconds int) string
}

// Servers lists MySQL (or MariaDB) and PostgreSQL.
func Servers() []Server {
	return []Server{
		{Name: "mysql", Open: OpenMySQL, Sleep: func(s int) string { return fmt.Sprintf("SELECT SLEEP(%d)", s) }},
		{Name: "postgres", Open: OpenPG, Sleep: func(s int) string { return fmt.Sprintf("SELECT pg_sleep(%d)", s) }},
		{Name: "sqlite", Open: OpenSQLiteShared, Sleep: sqliteSleep},
	}
}

// Name returns a fresh name with the given prefix, for a test's own tables.
func Name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Exec runs statements on db and fails the test on error. A CREATE TABLE
// written for MySQL is translated for db's server by DDL.
func Exec(t testing.TB, db *bun.DB, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		for _, s := range DDL(serverOf(db), stmt) {
			_, err := db.Exec(s)
			if err != nil && racedIfNotExists(s, err) {
				_, err = db.Exec(s) // the other creator has committed: it exists now
			}
			require.NoError(t, err, s)
		}
	}
}

// racedIfNotExists reports whether err is PostgreSQL's answer to a
// CREATE … IF NOT EXISTS that ran at the same time as another session's
// (parallel tests sharing a table): the loser of the race on the
// catalog's unique index gets a unique violation (23505) instead of
// finding the table there, which it would a moment later.
func racedIfNotExists(stmt string, err error) bool {
	return strings.Contains(strings.ToUpper(stmt), "IF NOT EXISTS") && strings.Contains(err.Error(), "SQLSTATE 23505")
}

// ConnectionID returns the server's id for the connection of tx: MySQL's
// CONNECTION_ID(), PostgreSQL's pg_backend_pid().
func ConnectionID(t testing.TB, tx bun.IDB) int64 {
	t.Helper()
	q := "SELECT CONNECTION_ID()"
	if tx.Dialect().Name() == dialect.PG {
		q = "SELECT pg_backend_pid()"
	}
	var id int64
	require.NoError(t, tx.NewRaw(q).Scan(t.Context(), &id))
	return id
}

// KillSQL returns the statement that ends the server session id (as
// ConnectionID returns it) on the server the tests run on.
func KillSQL(id int64) string {
	if IsPostgres() {
		return fmt.Sprintf("SELECT pg_terminate_backend(%d)", id)
	}
	return fmt.Sprintf("KILL %d", id)
}

// pgStates maps the MySQL error numbers the tests check to the
// PostgreSQL SQLSTATE of the same condition.
var pgStates = map[uint16][]string{
	1062: {"23505"},          // duplicate key: unique_violation
	1146: {"42P01"},          // no such table: undefined_table
	1054: {"42703"},          // no such column: undefined_column
	1205: {"55P03", "57014"}, // lock wait timeout: lock_not_available, query_canceled (lock_timeout, statement_timeout)
	1213: {"40P01"},          // deadlock: deadlock_detected
	1317: {"57014"},          // query interrupted: query_canceled
}

// IsMySQLError reports whether err is a server error with that MySQL
// number, or, from PostgreSQL, the error of the same condition (see
// pgStates; numbers without an equivalent never match there).
func IsMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == number
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return slices.Contains(pgStates[number], pe.Code)
	}
	return false
}

// IsDuplicate reports whether err is a duplicate-key error.
func IsDuplicate(err error) bool { return IsMySQLError(err, 1062) }

// IsMissingTable reports whether err says a table does not exist.
func IsMissingTable(err error) bool { return IsMySQLError(err, 1146) }

// IsDeadlock reports whether err is a deadlock error.
func IsDeadlock(err error) bool { return IsMySQLError(err, 1213) }

// IsLockTimeout reports whether err is a lock wait timeout.
func IsLockTimeout(err error) bool { return IsMySQLError(err, 1205) }

// OpenDB opens the server the tests run on (see ServerName) outside a
// test, as a worker process the tests start does; close it when done.
func OpenDB() (*bun.DB, error) {
	if IsPostgres() {
		sqldb, err := sql.Open("pgx", PGDSN())
		if err != nil {
			return nil, err
		}
		return bun.NewDB(sqldb, pgdialect.New()), nil
	}
	sqldb, err := sql.Open("mysql", DSN())
	if err != nil {
		return nil, err
	}
	return bun.NewDB(sqldb, mysqldialect.New()), nil
}

// OpenSession is Open with session settings given in the DSN: system
// variables on MySQL (values as SQL literals, such as "'+09:00'"), run-time
// parameters on PostgreSQL (values as they are, such as "Asia/Tokyo").
// Settings apply to the server chosen; pass those of that server.
func OpenSession(t testing.TB, maxConns int, settings map[string]string) *bun.DB {
	t.Helper()
	var sqldb *sql.DB
	var err error
	if IsPostgres() {
		u, perr := url.Parse(PGDSN())
		require.NoError(t, perr)
		q := u.Query()
		for k, v := range settings {
			q.Set(k, v)
		}
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx does not read + as a space
		sqldb, err = sql.Open("pgx", u.String())
	} else {
		cfg, perr := mysql.ParseDSN(DSN())
		require.NoError(t, perr)
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		for k, v := range settings {
			cfg.Params[k] = v
		}
		sqldb, err = sql.Open("mysql", cfg.FormatDSN())
	}
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	var db *bun.DB
	if IsPostgres() {
		db = bun.NewDB(sqldb, pgdialect.New())
	} else {
		db = bun.NewDB(sqldb, mysqldialect.New())
	}
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}

// Scratch creates an empty database of the test's own (on PostgreSQL, a
// schema of the test database, first on the DSN's search_path), dropped
// when the test ends, and returns a DSN for OpenDSN that points to it.
func Scratch(t testing.TB, prefix string) string {
	t.Helper()
	admin := Open(t, 0)
	name := Name(prefix)
	if IsPostgres() {
		Exec(t, admin, "CREATE SCHEMA "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE") })
		u, err := url.Parse(PGDSN())
		require.NoError(t, err)
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	Exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg, err := mysql.ParseDSN(DSN())
	require.NoError(t, err)
	cfg.DBName = name
	return cfg.FormatDSN()
}

// OpenDSN opens a pool of at most maxConns connections (0: unlimited) on
// dsn, a DSN of the server the tests run on, closed when the test ends.
func OpenDSN(t testing.TB, dsn string, maxConns int) *bun.DB {
	t.Helper()
	driver, d := "mysql", schema.Dialect(mysqldialect.New())
	if IsPostgres() {
		driver, d = "pgx", pgdialect.New()
	}
	sqldb, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	db := bun.NewDB(sqldb, d)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}
