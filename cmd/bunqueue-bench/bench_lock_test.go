package main

import (
	"bytes"
	"database/sql"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// TestBenchLock checks, on each server, that a bench waits for the server
// lock another holds and then gives up, and that it releases the lock.
func TestBenchLock(t *testing.T) {
	pg := func(t *testing.T) string {
		admin := dbtest.OpenPG(t, 2)
		name := dbtest.Name("bqbench_lock")
		dbtest.Exec(t, admin, "CREATE DATABASE "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
		return pgDSN(t, func(u *url.URL) { u.Path = "/" + name })
	}
	for _, tc := range []struct {
		server string
		dsn    func(t *testing.T) string
		driver string
	}{
		{"mysql", func(*testing.T) string { return dbtest.DSN() }, "mysql"},
		{"postgres", pg, "pgx"},
	} {
		t.Run(tc.server, func(t *testing.T) {
			dsn := tc.dsn(t)
			sqldb, err := sql.Open(tc.driver, dsn)
			require.NoError(t, err)
			db := bun.NewDB(sqldb, mysqldialect.New())
			if tc.server == "postgres" {
				db = bun.NewDB(sqldb, pgdialect.New())
			}
			t.Cleanup(func() { _ = db.Close() })
			conn, err := db.Conn(t.Context())
			require.NoError(t, err)
			defer conn.Close()
			b := newBench(dsn, io.Discard)
			unlock, err := b.dialect.Lock(t.Context(), conn, benchLock, time.Second)
			require.NoError(t, err)

			run := func() (string, int) {
				var stdout, stderr bytes.Buffer
				code := runBench(t.Context(), []string{"--dsn", dsn, "--duration", "100ms", "--only", "ceiling-1", "--no-tx"}, &stdout, &stderr)
				return stderr.String(), code
			}
			wait := benchLockWait
			benchLockWait = 200 * time.Millisecond
			stderr, code := run()
			benchLockWait = wait
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, benchLock)
			require.Contains(t, stderr, "another bunqueue-bench")

			require.NoError(t, unlock())
			stderr, code = run()
			require.Equal(t, exitOK, code, stderr)

			// The bench released the lock when it ended.
			unlock, err = b.dialect.Lock(t.Context(), conn, benchLock, 0)
			require.NoError(t, err)
			require.NoError(t, unlock())
		})
	}
}
