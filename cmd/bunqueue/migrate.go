package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
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
	dsnFlag := fs.String("dsn", "", dsnUsage)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	printSQL := fs.Bool("sql", false, "print the SQL instead of running it (no connection is made), for your own migration tool:\n"+
		"PostgreSQL's for a postgres:// DSN, else MySQL's and MariaDB's")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue migrate [--dsn DSN] [--json] [--sql]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Creates or upgrades the jobs tables (bunqueue_jobs, bunqueue_failed_jobs) and")
		fmt.Fprintln(stderr, "records the schema version in bunqueue_migrations, as bunqueue.Migrate does.")
		fmt.Fprintln(stderr, "Idempotent, and safe to run from several processes at once.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *printSQL {
		dsn, _ := resolveDSN(*dsnFlag, os.Getenv)
		fmt.Fprint(stdout, schemaSQL(dsn))
		return exitOK
	}
	d, err := connect(ctx, *dsnFlag)
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	defer d.close()
	before, err := schemaVersion(ctx, d)
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	if err := bunqueue.Migrate(ctx, d.db); err != nil {
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
		fmt.Fprintf(stdout, "migrated the jobs tables in %s from schema version %d to %d\n", d.where, before, after)
	} else {
		fmt.Fprintf(stdout, "the jobs tables in %s are up to date (schema version %d)\n", d.where, after)
	}
	return exitOK
}

// schemaVersion returns the newest schema version recorded in
// bunqueue_migrations, 0 if none or if the table does not exist.
func schemaVersion(ctx context.Context, d *database) (int, error) {
	var v sql.NullInt64
	err := d.db.NewRaw("SELECT MAX(version) FROM bunqueue_migrations").Scan(ctx, &v)
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
func schemaSQL(dsn string) string {
	if isPostgresDSN(dsn) {
		return migrate.Postgres.SQL(sqldialect.Postgres{}, "PostgreSQL 12+")
	}
	return bunqueue.MigrationSQL()
}
