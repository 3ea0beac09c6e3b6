package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
)

// connectTimeout bounds the first connection to the server.
const connectTimeout = 10 * time.Second

// database is an open connection pool and where it points, for messages.
type database struct {
	db     *bun.DB
	where  string // "database test at 127.0.0.1:3306 as root"
	source string // where the DSN came from
}

// dsnSource says where dsnFrom took the DSN from.
func dsnSource(flagValue string) string {
	switch {
	case flagValue != "":
		return "from --dsn"
	case os.Getenv("BUNQUEUE_MYSQL_DSN") != "":
		return "from BUNQUEUE_MYSQL_DSN"
	}
	return "the default, " + defaultDSN
}

// connect opens the database of the --dsn flag (else BUNQUEUE_MYSQL_DSN,
// else the default) and checks that it answers. Times are read as UTC
// whatever the DSN says, as bunqueue needs. Its errors say which server
// it tried and how to point the tool elsewhere.
func connect(ctx context.Context, flagValue string) (*database, error) {
	source := dsnSource(flagValue)
	cfg, err := mysql.ParseDSN(dsnFrom(flagValue))
	if err != nil {
		return nil, fmt.Errorf("the DSN (%s) is not valid: %w; set it with --dsn or BUNQUEUE_MYSQL_DSN, "+
			"such as %s", source, err, defaultDSN)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Timeout == 0 {
		cfg.Timeout = connectTimeout
	}
	d := &database{source: source, where: fmt.Sprintf("database %q at %s as %q", cfg.DBName, cfg.Addr, cfg.User)}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("the DSN (%s) names no database: add it after the slash, as in %s; "+
			"set the DSN with --dsn or BUNQUEUE_MYSQL_DSN", source, defaultDSN)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("the DSN (%s) is not valid: %w", source, err)
	}
	sqldb := sql.OpenDB(connector)
	sqldb.SetMaxOpenConns(4)
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := sqldb.PingContext(pingCtx); err != nil {
		_ = sqldb.Close()
		why := "cannot connect to"
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			switch me.Number {
			case 1045, 1698:
				why = "the server refused the login to"
			case 1049:
				why = "the server has no"
			}
		}
		return nil, fmt.Errorf("%s %s (DSN %s): %w; set the DSN with --dsn or BUNQUEUE_MYSQL_DSN",
			why, d.where, source, err)
	}
	d.db = bun.NewDB(sqldb, mysqldialect.New())
	return d, nil
}

// close closes the pool.
func (d *database) close() { _ = d.db.Close() }

// explain turns an error of a query on the jobs tables into one a person
// can act on: a missing table means the tool should migrate first.
func (d *database) explain(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return fmt.Errorf("the jobs tables are missing in %s: run `bunqueue migrate` (with the same --dsn) "+
			"to create them (%w)", d.where, err)
	}
	return err
}

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
