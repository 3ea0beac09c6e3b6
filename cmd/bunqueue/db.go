package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// connectTimeout bounds the first connection to the server.
const connectTimeout = 10 * time.Second

// examplePGDSN is the form of a PostgreSQL DSN, for messages.
const examplePGDSN = "postgres://user:password@127.0.0.1:5432/test?sslmode=disable"

// database is an open connection pool and where it points, for messages.
type database struct {
	db       *bun.DB
	dialect  sqldialect.Dialect
	postgres bool   // a PostgreSQL server, else MySQL or MariaDB
	where    string // "database test at 127.0.0.1:3306 as root"
	source   string // where the DSN came from
	tables   bunqueue.Tables
	names    tables.Names // of tables
}

// isPostgresDSN reports whether dsn names a PostgreSQL server: a
// postgres:// or postgresql:// URL. Anything else is a MySQL DSN.
func isPostgresDSN(dsn string) bool {
	dsn = strings.ToLower(strings.TrimSpace(dsn))
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// connect opens the database of the --dsn flag (else of the environment,
// else the default: resolveDSN) and checks that it answers: a PostgreSQL
// server for a postgres:// or postgresql:// URL, else a MySQL or MariaDB
// server, whichever variable held it. Times are read as UTC whatever a
// MySQL DSN says, as bunqueue needs. Its errors say which server it tried,
// where its DSN came from and how to point the tool elsewhere.
func connect(ctx context.Context, f dbFlags) (*database, error) {
	dsn, source := resolveDSN(*f.dsn, os.Getenv)
	var (
		d     *database
		sqldb *sql.DB
		err   error
	)
	if isPostgresDSN(dsn) {
		d, sqldb, err = openPostgres(dsn, source)
	} else {
		d, sqldb, err = openMySQL(dsn, source)
	}
	if err != nil {
		return nil, err
	}
	if d.tables, d.names, err = f.tables(d.postgres); err != nil {
		_ = sqldb.Close()
		return nil, err
	}
	sqldb.SetMaxOpenConns(4)
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := sqldb.PingContext(pingCtx); err != nil {
		_ = sqldb.Close()
		return nil, fmt.Errorf("%s %s (DSN %s): %w; set the DSN with --dsn or BUNQUEUE_DSN",
			connectFailure(err), d.where, source, err)
	}
	if d.postgres {
		d.db = bun.NewDB(sqldb, pgdialect.New())
	} else {
		d.db = bun.NewDB(sqldb, mysqldialect.New())
	}
	if d.dialect, err = sqldialect.For(d.db); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// openMySQL opens, without connecting, the MySQL or MariaDB server of dsn.
func openMySQL(dsn, source string) (*database, *sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("the DSN (%s) is not valid: %w; set it with --dsn or BUNQUEUE_DSN, "+
			"such as %s (MySQL, MariaDB) or %s (PostgreSQL)", source, err, defaultDSN, examplePGDSN)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Timeout == 0 {
		cfg.Timeout = connectTimeout
	}
	d := &database{source: source, where: fmt.Sprintf("database %q at %s as %q", cfg.DBName, cfg.Addr, cfg.User)}
	if cfg.DBName == "" {
		return nil, nil, fmt.Errorf("the DSN (%s) names no database: add it after the slash, as in %s; "+
			"set the DSN with --dsn or BUNQUEUE_DSN", source, defaultDSN)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("the DSN (%s) is not valid: %w", source, err)
	}
	return d, sql.OpenDB(connector), nil
}

// openPostgres opens, without connecting, the PostgreSQL server of dsn,
// through pgx's database/sql driver.
func openPostgres(dsn, source string) (*database, *sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message shows the DSN with its password redacted.
		return nil, nil, fmt.Errorf("the DSN (%s) is not valid: %w; set it with --dsn or BUNQUEUE_DSN, "+
			"such as %s", source, err, examplePGDSN)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	name := cfg.Database
	if name == "" {
		name = cfg.User // the server's default database is the user's name
	}
	d := &database{postgres: true, source: source,
		where: fmt.Sprintf("PostgreSQL database %q at %s as %q", name,
			net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.User)}
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket's directory
		d.where = fmt.Sprintf("PostgreSQL database %q at %s (port %d) as %q", name, cfg.Host, cfg.Port, cfg.User)
	}
	return d, stdlib.OpenDB(*cfg), nil
}

// connectFailure says, for the error of a first connection, what went
// wrong: the login was refused, the database does not exist, or the
// server could not be reached.
func connectFailure(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045, 1698:
			return "the server refused the login to"
		case 1049:
			return "the server has no"
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			return "the server refused the login to"
		case "3D000": // invalid_catalog_name
			return "the server has no"
		}
	}
	return "cannot connect to"
}

// close closes the pool.
func (d *database) close() { _ = d.db.Close() }

// explain turns an error of a query on the jobs tables into one a person
// can act on: a missing table means the tool should migrate first. It
// says so once, with the server's own error, not the library's message
// (bunqueue.ErrNotMigrated says to migrate too) nested in the tool's.
func (d *database) explain(err error) error {
	if errors.Is(err, bunqueue.ErrNotMigrated) || d.dialect != nil && d.dialect.MissingTable(err) {
		return &explained{err: err, msg: fmt.Sprintf("the jobs tables are missing in %s: run `bunqueue migrate` (with the same --dsn) "+
			"to create them (%v)", d.where, d.missingTable(err))}
	}
	return err
}

// missingTable returns the error in err's tree that says a table does not
// exist: the server's own, the first such error that wraps no other. It
// returns err if there is none.
func (d *database) missingTable(err error) error {
	var walk func(e error) error
	walk = func(e error) error {
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			return walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := walk(e); found != nil {
					return found
				}
			}
			return nil
		}
		if e != nil && d.dialect != nil && d.dialect.MissingTable(e) {
			return e
		}
		return nil
	}
	if found := walk(err); found != nil {
		return found
	}
	return err
}

// explained is an error with the message explain gave it.
type explained struct {
	err error
	msg string
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// fail prints err for the command name and returns exitError.
func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "bunqueue %s: %v\n", name, err)
	return exitError
}

// printable returns s with each control or format character that could
// move a terminal's cursor or change its colours (an untrusted payload or
// error may hold them) shown as a \uXXXX escape. Tabs are kept, and
// newlines if keepNewlines.
func printable(s string, keepNewlines bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' && keepNewlines:
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
