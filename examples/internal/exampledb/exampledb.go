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
// fail with SQLITE_BUSY).
const SQLiteOptions = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"

// Open opens the database for the example name with at most maxConns
// connections, and describes where it is.
func Open(name string, maxConns int) (*bun.DB, string, error) {
	if dsn := os.Getenv("BUNQUEUE_MYSQL_DSN"); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, "", fmt.Errorf("BUNQUEUE_MYSQL_DSN: %w", err)
		}
		cfg.ParseTime = true // DATETIME columns scan into time.Time…
		cfg.Loc = time.UTC   // …as UTC
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, "", fmt.Errorf("BUNQUEUE_MYSQL_DSN: %w", err)
		}
		sqldb := sql.OpenDB(connector)
		sqldb.SetMaxOpenConns(maxConns)
		return bun.NewDB(sqldb, mysqldialect.New()), fmt.Sprintf("MySQL database %q at %s", cfg.DBName, cfg.Addr), nil
	}
	if dsn := os.Getenv("BUNQUEUE_PG_DSN"); dsn != "" {
		sqldb, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, "", fmt.Errorf("BUNQUEUE_PG_DSN: %w", err)
		}
		sqldb.SetMaxOpenConns(maxConns)
		return bun.NewDB(sqldb, pgdialect.New()), "PostgreSQL at BUNQUEUE_PG_DSN", nil
	}
	path := filepath.Join(os.TempDir(), "bunqueue-example-"+name+".db")
	sqldb, err := sql.Open("sqlite", "file:"+path+"?"+SQLiteOptions)
	if err != nil {
		return nil, "", err
	}
	sqldb.SetMaxOpenConns(maxConns)
	return bun.NewDB(sqldb, sqlitedialect.New()), "SQLite file " + path + " (set BUNQUEUE_MYSQL_DSN or BUNQUEUE_PG_DSN to use a server)", nil
}
