package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// migrateReport is what migrate --json prints.
type migrateReport struct {
	Database string `json:"database"`
	Before   int    `json:"version_before"`
	Version  int    `json:"version"`
	Applied  bool   `json:"applied"`
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	printSQL := fs.Bool("sql", false, "print the SQL instead of running it (no connection is made), for your own migration tool:\n"+
		"PostgreSQL's for a postgres:// DSN, else MySQL's and MariaDB's")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue migrate [--dsn DSN] [--prefix P] [--schema S] [--json] [--sql]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Creates or upgrades bunqueue's tables, as bunqueue.Migrate does: by default")
		fmt.Fprintln(stderr, tablesList()+";")
		fmt.Fprintln(stderr, "with --prefix, the same names with the prefix in place of bunqueue_, and with")
		fmt.Fprintln(stderr, "--schema in that PostgreSQL schema. Idempotent, and safe to run from several")
		fmt.Fprintln(stderr, "processes at once.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *printSQL {
		dsn, _ := resolveDSN(*dbf.dsn, os.Getenv)
		_, names, err := dbf.tables(isPostgresDSN(dsn))
		if err != nil {
			fmt.Fprintf(stderr, "migrate: %v\n", err)
			return exitUsage
		}
		fmt.Fprint(stdout, schemaSQL(dsn, names))
		return exitOK
	}
	d, err := connect(ctx, dbf)
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	defer d.close()
	before, err := schemaVersion(ctx, d)
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	if err := d.tables.Migrate(ctx, d.db); err != nil {
		return fail(stderr, "migrate", fmt.Errorf("%s: %w", d.where, err))
	}
	after, err := schemaVersion(ctx, d)
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	rep := migrateReport{Database: d.where, Before: before, Version: after, Applied: after != before}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return fail(stderr, "migrate", err)
		}
		return exitOK
	}
	if rep.Applied {
		fmt.Fprintf(stdout, "migrated the jobs tables (%s) in %s from schema version %d to %d\n", d.tables, d.where, before, after)
	} else {
		fmt.Fprintf(stdout, "the jobs tables (%s) in %s are up to date (schema version %d)\n", d.tables, d.where, after)
	}
	return exitOK
}

// schemaVersion returns the newest schema version recorded in the
// migrations table, 0 if none or if the table does not exist.
func schemaVersion(ctx context.Context, d *database) (int, error) {
	var v sql.NullInt64
	err := d.db.NewRaw("SELECT MAX(version) FROM "+d.names.Migrations).Scan(ctx, &v)
	switch {
	case d.dialect.MissingTable(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read the schema version in %s: %w", d.where, err)
	}
	return int(v.Int64), nil
}

// schemaSQL returns the script of the jobs tables for the server dsn
// names, without connecting to it or checking the rest of the DSN:
// PostgreSQL's for a postgres:// URL, else MySQL's and MariaDB's (what
// bunqueue.MigrationSQL returns).
func schemaSQL(dsn string, n tables.Names) string {
	if isPostgresDSN(dsn) {
		return migrate.Postgres(n).SQL(sqldialect.Postgres{}, "PostgreSQL 12+")
	}
	return migrate.SQL(n)
}
