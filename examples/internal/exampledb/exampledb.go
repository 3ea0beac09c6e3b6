// Package exampledb opens the database the examples run on: MySQL or
// MariaDB when BUNQUEUE_MYSQL_DSN is set, PostgreSQL when BUNQUEUE_PG_DSN
// is, and otherwise an SQLite file of the example's own, so that the
// examples run on a machine with nothing but Go installed.
package exampledb

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SQLiteOptions are what bunqueue needs of an SQLite database: WAL, so
// that reads go on while a transaction writes; a busy timeout, so that
// writers wait for each other instead of failing at once; and
// _txlock=immediate, so that a transaction takes the write lock when it
// begins (two transactions that both read, then write, would otherwise
// fail with SQLITE_BUSY). And one that the examples' own tables need:
// foreign_keys(1), since SQLite enforces foreign keys (and runs their ON
// DELETE CASCADE) only on connections that turn them on.
const SQLiteOptions = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"

// The kinds of database OpenDSN opens.
const (
	MySQL    = "mysql"    // MySQL or MariaDB, a go-sql-driver/mysql DSN
	Postgres = "postgres" // PostgreSQL, a pgx DSN (URL or key=value)
	SQLite   = "sqlite"   // SQLite, the path of the database file
)

// Open opens the database for the example name with at most maxConns
// connections, and describes where it is.
func Open(name string, maxConns int) (*bun.DB, string, error) {
	if dsn := os.Getenv("BUNQUEUE_MYSQL_DSN"); dsn != "" {
		db, where, err := OpenDSN(MySQL, dsn, maxConns)
		if err != nil {
			return nil, "", fmt.Errorf("BUNQUEUE_MYSQL_DSN: %w", err)
		}
		return db, where, nil
	}
	if dsn := os.Getenv("BUNQUEUE_PG_DSN"); dsn != "" {
		db, _, err := OpenDSN(Postgres, dsn, maxConns)
		if err != nil {
			return nil, "", fmt.Errorf("BUNQUEUE_PG_DSN: %w", err)
		}
		return db, "PostgreSQL at BUNQUEUE_PG_DSN", nil
	}
	path := filepath.Join(os.TempDir(), "bunqueue-example-"+name+".db")
	db, where, err := OpenDSN(SQLite, path, maxConns)
	if err != nil {
		return nil, "", err
	}
	return db, where + " (set BUNQUEUE_MYSQL_DSN or BUNQUEUE_PG_DSN to use a server)", nil
}

// OpenDSN opens the database of the given kind (MySQL, Postgres or
// SQLite) at dsn with at most maxConns connections, as Open does once it
// has chosen, and describes where it is. For SQLite, dsn is the path of
// the database file (created if missing), opened with SQLiteOptions.
// Tests use it to run an example on a database of their choice.
func OpenDSN(kind, dsn string, maxConns int) (*bun.DB, string, error) {
	var (
		db    *bun.DB
		where string
	)
	switch kind {
	case MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, "", err
		}
		cfg.ParseTime = true // DATETIME columns scan into time.Time…
		cfg.Loc = time.UTC   // …as UTC
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, "", err
		}
		db = bun.NewDB(sql.OpenDB(connector), mysqldialect.New())
		where = fmt.Sprintf("MySQL database %q at %s", cfg.DBName, cfg.Addr)
	case Postgres:
		sqldb, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, "", err
		}
		db = bun.NewDB(sqldb, pgdialect.New())
		where = "PostgreSQL"
	case SQLite:
		sqldb, err := sql.Open("sqlite", SQLiteDSN(dsn))
		if err != nil {
			return nil, "", err
		}
		db = bun.NewDB(sqldb, sqlitedialect.New())
		where = "SQLite file " + dsn
	default:
		return nil, "", fmt.Errorf("exampledb: unknown kind of database %q (want %q, %q or %q)", kind, MySQL, Postgres, SQLite)
	}
	db.SetMaxOpenConns(maxConns)
	return db, where, nil
}

// SQLiteDSN is the modernc.org/sqlite DSN of the database file at path,
// with SQLiteOptions.
func SQLiteDSN(path string) string {
	return "file:" + path + "?" + SQLiteOptions
}
