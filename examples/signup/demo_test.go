package main

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/bunqueue/bunqueue/examples/internal/exampledb"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// TestDemo runs `go run ./examples/signup -demo` end to end (but for
// opening the database, which main does by the environment) on a fresh
// database of each server: a new SQLite file in t.TempDir(), a new
// schema of the PostgreSQL test database, a new MySQL database. Fresh, as
// the demo uses the jobs queue "default", which other tests of the
// servers' shared databases may use too. runDemo checks the database
// itself and fails on anything out of place.
func TestDemo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kind string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", exampledb.SQLite, func(t *testing.T) string { return filepath.Join(t.TempDir(), "signup.db") }},
		{"postgres", exampledb.Postgres, freshPGSchema},
		{"mysql", exampledb.MySQL, freshMySQLDatabase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := tc.dsn(t)
			db := openTestDB(t, tc.kind, dsn)
			if tc.kind == exampledb.Postgres {
				var schema string
				if err := db.NewRaw("SELECT current_schema()").Scan(t.Context(), &schema); err != nil || !strings.HasPrefix(schema, "signup_demo_") {
					t.Fatalf("current_schema(): %q, %v; want the test's fresh schema", schema, err)
				}
			}
			// Twice: the second run deletes the first's users (their
			// welcome email records go with them: ON DELETE CASCADE) and
			// signs them up again.
			for range 2 {
				if err := runOn(t.Context(), db, tc.name, nil, "127.0.0.1:0", true); err != nil {
					t.Fatal(err)
				}
			}
			var users, sent int
			if err := db.NewRaw("SELECT COUNT(*) FROM example_signup_user").Scan(t.Context(), &users); err != nil {
				t.Fatal(err)
			}
			if err := db.NewRaw("SELECT COUNT(*) FROM example_signup_sent").Scan(t.Context(), &sent); err != nil {
				t.Fatal(err)
			}
			if users != 2 || sent != 2 {
				t.Errorf("after two demos: %d users and %d welcome email records, want 2 and 2", users, sent)
			}
			// What main gives the spans as db.name, with tracing on.
			if name, err := databaseName(t.Context(), db); err != nil || name == "" {
				t.Errorf("databaseName: %q, %v; want a name", name, err)
			}
		})
	}
}

// TestCreateTablesConcurrently creates the app's tables from several
// connections at once on a fresh database of each server, as processes
// that start together do.
func TestCreateTablesConcurrently(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kind string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", exampledb.SQLite, func(t *testing.T) string { return filepath.Join(t.TempDir(), "signup.db") }},
		{"postgres", exampledb.Postgres, freshPGSchema},
		{"mysql", exampledb.MySQL, freshMySQLDatabase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openTestDB(t, tc.kind, tc.dsn(t))
			const n = 8
			errs := make(chan error, n)
			for range n {
				go func() { errs <- createTables(t.Context(), db) }()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// freshPGSchema creates a schema in the PostgreSQL test database,
// dropped when the test ends, and returns a DSN whose search_path is it.
func freshPGSchema(t *testing.T) string {
	t.Helper()
	admin := openTestDB(t, exampledb.Postgres, dbtest.PGDSN())
	name := "signup_demo_" + randomSuffix()
	if _, err := admin.ExecContext(t.Context(), "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE") })
	dsn := dbtest.PGDSN()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(dsn) + " search_path=" + name // key=value form
}

// freshMySQLDatabase creates a database on the MySQL test server,
// dropped when the test ends, and returns a DSN that uses it.
func freshMySQLDatabase(t *testing.T) string {
	t.Helper()
	admin := openTestDB(t, exampledb.MySQL, dbtest.DSN())
	name := "signup_demo_" + randomSuffix()
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	cfg, err := mysql.ParseDSN(dbtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}
