package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// runRows runs the bench binary with args and --json, and returns its rows
// by scenario.
func runRows(t *testing.T, bin string, args ...string) (report, map[string]result) {
	t.Helper()
	stdout, stderr, code := runBinary(t, bin, append([]string{"--json"}, args...)...)
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	rows := map[string]result{}
	for _, r := range rep.Results {
		rows[r.Scenario] = r
	}
	return rep, rows
}

// TestBenchCrossProcessLatency runs, very short, the cross-process latency
// scenarios: on PostgreSQL, latency-xproc-notify reports its percentiles
// with the notifications it received, beside latency-xproc; on MySQL or
// MariaDB it is skipped, saying why.
func TestBenchCrossProcessLatency(t *testing.T) {
	bin := buildBinary(t)

	t.Run("postgres", func(t *testing.T) {
		admin := dbtest.OpenPG(t, 2)
		name := dbtest.Name("bqbench_xproc")
		dbtest.Exec(t, admin, "CREATE DATABASE "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
		dsn := pgDSN(t, func(u *url.URL) { u.Path = "/" + name })

		rep, rows := runRows(t, bin, "--dsn", dsn, "--duration", "1s", "--only", "latency-xproc,latency-xproc-notify,latency-xproc-notify-table")
		require.True(t, strings.HasPrefix(rep.Server, "PostgreSQL "), rep.Server)
		require.Len(t, rows, 3, "no other row")
		for _, name := range []string{"latency-xproc", "latency-xproc-notify", "latency-xproc-notify-table"} {
			r, ok := rows[name]
			require.True(t, ok, "no %s row", name)
			require.False(t, r.Skipped, name)
			require.Positive(t, r.ItemsPerSec, name)
			require.NotNil(t, r.P50ms, "%s: no p50", name)
			require.NotNil(t, r.P99ms, "%s: no p99", name)
			require.LessOrEqual(t, *r.P50ms, *r.P99ms, name)
			require.NotContains(t, r.Note, "NOT started", name)
		}
		require.Contains(t, rows["latency-xproc"].Note, "from the return of Enqueue")
		require.Contains(t, rows["latency-xproc-notify-table"].Note, "from the commit")
		tn := rows["latency-xproc-notify-table"].Note
		require.Contains(t, tn, "Client.Notify")
		require.NotContains(t, tn, " 0 notifications received", "the child's Notify calls reached the listener")
		n := rows["latency-xproc-notify"].Note
		require.Contains(t, n, "notifications received")
		require.NotContains(t, n, " 0 notifications received", "the child's enqueues notified the listener")
		require.Contains(t, n, "after the last one")
		require.Contains(t, n, "the path, p50 / p99 ms")
		require.Contains(t, n, "goal p50 ≤ 5ms, p99 ≤ 20ms")
		require.Contains(t, rows["latency-xproc"].Note, "PollInterval")
	})

	t.Run("mysql", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "--dsn", dbtest.DSN(), "--only", "latency-xproc-notify,latency-xproc-notify-table")
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		require.Contains(t, tableRow(t, stdout, "latency-xproc-notify", "-"), "skipped:")
		require.Contains(t, tableRow(t, stdout, "latency-xproc-notify-table", "-"), "skipped:")
		require.Contains(t, stdout, "the server has no notifications")

		_, rows := runRows(t, bin, "--dsn", dbtest.DSN(), "--only", "latency-xproc-notify,latency-xproc-notify-table")
		require.Len(t, rows, 2, "the two notify rows, no other")
		for name, r := range rows {
			require.True(t, r.Skipped, "%s: the row says it was skipped", name)
			require.Contains(t, r.Note, "no notifications", name)
			require.Nil(t, r.P50ms, name)
			require.Zero(t, r.ItemsPerSec, name)
		}
	})
}
