// Package dbtest opens the real test database for the package tests.
package dbtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
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

// Open returns a *bun.DB with its own connection pool of at most
// maxConns connections (0: unlimited), closed when the test ends.
func Open(t testing.TB, maxConns int) *bun.DB {
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
		{Name: "mysql", Open: Open, Sleep: func(s int) string { return fmt.Sprintf("SELECT SLEEP(%d)", s) }},
		{Name: "postgres", Open: OpenPG, Sleep: func(s int) string { return fmt.Sprintf("SELECT pg_sleep(%d)", s) }},
	}
}

// Name returns a fresh name with the given prefix, for a test's own tables.
func Name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Exec runs statements on db and fails the test on error.
func Exec(t testing.TB, db *bun.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.Exec(s)
		require.NoError(t, err, s)
	}
}

// ConnectionID returns the server's id for the connection of tx.
func ConnectionID(t testing.TB, tx bun.IDB) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tx.NewRaw("SELECT CONNECTION_ID()").Scan(t.Context(), &id))
	return id
}

// IsMySQLError reports whether err is a server error with that number.
func IsMySQLError(err error, number uint16) bool {
	me, ok := err.(*mysql.MySQLError)
	return ok && me.Number == number
}
