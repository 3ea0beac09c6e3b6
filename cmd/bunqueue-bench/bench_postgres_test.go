package main

import (
	"database/sql"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// TestBenchPostgres runs, very short, the bench's scenarios whose SQL
// differs on PostgreSQL (with the baselines they pull in: the
// 16-connection ceiling and table-b1), in a database of its own.
func TestBenchPostgres(t *testing.T) {
	if os.Getenv("BUNQUEUE_LONG") == "" {
		t.Skip("the scenarios whose SQL differs on PostgreSQL, again on it: set BUNQUEUE_LONG=1 (docs/testing.md, Longer runs); TestCommand runs each scenario on MariaDB")
	}
	admin := dbtest.OpenPG(t, 2)
	name := dbtest.Name("bqbench_pg")
	dbtest.Exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	dsn := pgDSN(t, func(u *url.URL) { u.Path = "/" + name })
	bin := buildBinary(t)

	only := []string{"ceiling-1", "seed-baseline", "backlog-1m", "post-burst-table", "post-burst-held", "memory-1k", "latency-xproc",
		"write-only", "write-only-jobs-b50", "design-bound", "design-bound-jobs", "design-bound-prepared", "table-b1-prepared-handler",
		// Not the 3 × 16 ones: 60 connections of the server's 100, with
		// the other tests'.
		"fleet-lock-3x4", "fleet-lease-3x4", "fleet-table-3x4"}
	// Half a second: in 200 ms (50 ms of warm-up) a CI run, loaded by the
	// other packages' tests, once saw no transaction of 50 DELETEs commit
	// (write-only-jobs-b50 at 0 items/s).
	// --no-tx: counting PostgreSQL's transactions keeps each window's
	// work going a second more; requireDelayRows counts them.
	stdout, stderr, code := runBinary(t, bin, "--dsn", dsn, "--json", "--duration", "500ms", "--no-tx",
		"--large", "5000", "--burst", "1000", "--fleet-backlog", "300", "--only", strings.Join(only, ","))
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.True(t, strings.HasPrefix(rep.Server, "PostgreSQL "), rep.Server)
	rows := map[string]result{}
	for _, r := range rep.Results {
		rows[r.Scenario] = r
	}
	for _, name := range append(only, "ceiling-16", "table-b1") {
		r, ok := rows[name]
		require.True(t, ok, "no %s row in:\n%s", name, stdout)
		require.Positive(t, r.ItemsPerSec, "%s: no items/s", name)
	}
	require.Len(t, rows, len(only)+2, "no other row")
	require.Equal(t, "not counted: --no-tx", rep.TxCounted)
	require.Nil(t, rows["ceiling-16"].TxPerItem, "--no-tx")
	require.NotNil(t, rows["seed-baseline"].Ratio, "seed-baseline: no ratio to the ceiling measured on PostgreSQL")
	require.Contains(t, rows["backlog-1m"].Note, "of table-b1")
	require.Contains(t, rows["post-burst-table"].Note, "n_dead_tup")
	require.Contains(t, rows["post-burst-table"].Note, "vacuum free to run")
	require.Contains(t, rows["post-burst-held"].Note, "REPEATABLE READ snapshot")
	require.Contains(t, rows["post-burst-held"].Note, "n_dead_tup")
	require.Contains(t, rows["memory-1k"].Note, "VmHWM")
	require.NotNil(t, rows["latency-xproc"].P99ms)
	requireConflictColumns(t, rows)
	for _, name := range []string{"fleet-lock-3x4", "fleet-lease-3x4", "fleet-table-3x4"} {
		requireFleetHandledAll(t, rows[name], 300)
	}
	require.Contains(t, rows["fleet-lock-3x4"].Note, "VACUUM ANALYZE bunqueue_jobs")

	requireDelayRows(t, bin, dsn)

	// It cleaned up after itself: no bench table, and no job of its queues.
	sqldb, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	db := bun.NewDB(sqldb, pgdialect.New())
	defer db.Close()
	var left []string
	require.NoError(t, db.NewRaw("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'bench%'").Scan(t.Context(), &left))
	require.Empty(t, left, "tables left")
	var jobs int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM bunqueue_jobs WHERE queue LIKE 'bench%'").Scan(t.Context(), &jobs))
	require.Zero(t, jobs, "jobs left")

	// It analyzed the tables it filled, as autovacuum would have: counted
	// apart from autovacuum's own (autoanalyze_count).
	var analyzed int
	require.NoError(t, db.NewRaw("SELECT COALESCE(SUM(analyze_count), 0) FROM pg_stat_user_tables WHERE relname = 'bunqueue_jobs'").Scan(t.Context(), &analyzed))
	require.Positive(t, analyzed, "the jobs table was never analyzed after a fill")
}

// requireDelayRows runs ceiling-1 on dsn through the forwarder at 0 and
// 1 ms each way, and checks the passes' pings and the rows' new columns.
func requireDelayRows(t *testing.T, bin, dsn string) {
	t.Helper()
	rep, _ := runRows(t, bin, "--dsn", dsn, "--duration", "500ms", "--only", "ceiling-1", "--delay", "0,1ms")
	require.Contains(t, rep.TxCounted, "pg_stat_database")
	require.Len(t, rep.Proxy, 2)
	for i, delay := range []string{"0s", "1ms"} {
		p := rep.Proxy[i]
		require.Equal(t, delay, p.Delay)
		require.Equal(t, int64(p.Pings), p.PingRoundTrips, "a round trip per ping")
		require.Positive(t, p.PingDirectMS)
		require.GreaterOrEqual(t, p.PingProxyMS, 2*p.DelayMS, "a ping through the forwarder: the delay each way at least")
		r := rep.Results[i]
		require.Equal(t, "ceiling-1", r.Scenario)
		require.Equal(t, delay, r.Delay)
		require.Positive(t, r.ItemsPerSec)
		require.NotNil(t, r.TxPerItem, "tx/item at %s", delay)
		require.Positive(t, *r.TxPerItem, "tx/item at %s", delay)
		require.NotNil(t, r.RoundTrips, "round trips at %s", delay)
		require.InDelta(t, 3, *r.RoundTrips, 0.5, "round trips per ceiling item at %s: BEGIN, UPDATE, COMMIT", delay)
		require.NotNil(t, r.ProxyCPU, "the forwarder's CPU at %s", delay)
	}
	require.Len(t, rep.Results, 2)
	requireNoProcess(t, bin)
}
