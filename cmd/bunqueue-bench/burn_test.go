package main

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// burnRows are the burn-down group's rows that run on every server.
var burnRows = []string{ceilingBeforeBurn, "jobs-burn-16", "jobs-burn-defaults", "jobs-burn-lease-16", ceilingAfterBurn}

// TestBenchBurnDowns runs, with burn-downs of 100 jobs, River's rows and
// bunqueue's burn-downs on PostgreSQL, with latency, which compares itself
// with river-latency; and bunqueue's burn-downs on MariaDB, where River's
// rows are skipped. It checks the rows and their fields, never a speed.
func TestBenchBurnDowns(t *testing.T) {
	bin := buildBinary(t)

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin := dbtest.OpenPG(t, 2)
		name := dbtest.Name("bqbench_river")
		dbtest.Exec(t, admin, "CREATE DATABASE "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
		dsn := pgDSN(t, func(u *url.URL) { u.Path = "/" + name })

		rep, rows := runRows(t, bin, "--dsn", dsn, "--duration", "300ms", "--burn", "100", "--only", "jobs-burn,river,latency")
		require.Equal(t, 100, rep.BurnJobs)
		want := append([]string{"ceiling-16", riverBurnTuned, riverBurnDefaults, riverLatencyName, "latency"}, burnRows...)
		require.Len(t, rows, len(want), "no other row")
		for _, name := range want {
			r, ok := rows[name]
			require.True(t, ok, "no %s row", name)
			require.False(t, r.Skipped, name)
			require.Positive(t, r.ItemsPerSec, name)
		}
		for _, name := range []string{riverBurnTuned, riverBurnDefaults, "jobs-burn-16", "jobs-burn-defaults", "jobs-burn-lease-16"} {
			requireBurnRow(t, rows[name], 100)
		}
		for _, name := range []string{riverBurnTuned, riverBurnDefaults} {
			n := rows[name].Note
			require.Contains(t, n, "River v", name)
			require.Contains(t, n, "MaxWorkers 16", name)
			require.Contains(t, n, "VACUUM ANALYZE bench_river.river_job before it", name)
			require.Nil(t, rows[name].RatioToRiver, "%s: River's own row", name)
		}
		require.Contains(t, rows[riverBurnTuned].Note, "FetchCooldown 2ms and FetchPollInterval 20ms as `river bench`")
		require.Contains(t, rows[riverBurnDefaults].Note, "River's defaults (FetchCooldown 100ms, FetchPollInterval 1s)")
		for _, name := range []string{"jobs-burn-16", "jobs-burn-defaults", "jobs-burn-lease-16"} {
			require.NotNil(t, rows[name].RatioToRiver, "%s: no ratio to River", name)
			require.Positive(t, *rows[name].RatioToRiver, name)
		}
		require.Contains(t, rows["jobs-burn-16"].Note, "VACUUM ANALYZE bunqueue_jobs before it")
		require.Contains(t, rows["jobs-burn-defaults"].Note, "of river-burn-defaults")
		require.Contains(t, rows["jobs-burn-lease-16"].Note, "lease mode")
		rl := rows[riverLatencyName]
		require.NotNil(t, rl.P50ms)
		require.NotNil(t, rl.P99ms)
		require.Contains(t, rl.Note, "one Insert each")
		require.Contains(t, rows["latency"].Note, "River in the same run (river-latency): p50")
		require.Contains(t, rows[ceilingAfterBurn].Note, "before them")
		requireConflictColumns(t, rows)

		// River's schema went with its rows.
		conn, err := pgx.Connect(t.Context(), dsn)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		var schemas int
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", riverSchema).Scan(&schemas))
		require.Zero(t, schemas, "the schema %s is left", riverSchema)
	})

	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		_, rows := runRows(t, bin, "--dsn", dbtest.DSN(), "--duration", "300ms", "--burn", "100", "--only", "jobs-burn")
		require.Len(t, rows, len(burnRows)+3, "the burn-down group, River's skipped rows and ceiling-16")
		for _, name := range []string{riverBurnTuned, riverBurnDefaults} {
			require.True(t, rows[name].Skipped, name)
			require.Contains(t, rows[name].Note, "PostgreSQL only", name)
		}
		for _, name := range []string{"jobs-burn-16", "jobs-burn-defaults", "jobs-burn-lease-16"} {
			requireBurnRow(t, rows[name], 100)
			require.Nil(t, rows[name].RatioToRiver, "%s: no River in this run", name)
		}
		requireConflictColumns(t, rows)
	})
}

// requireBurnRow checks a burn-down's row: n jobs, all completed, with the
// CPU per job and a ratio to the ceiling.
func requireBurnRow(t *testing.T, r result, n int) {
	t.Helper()
	require.False(t, r.Skipped, r.Scenario)
	require.Positive(t, r.ItemsPerSec, r.Scenario)
	require.Contains(t, r.Note, fmt.Sprintf("burn-down of %d jobs inserted first", n), r.Scenario)
	require.Contains(t, r.Note, "all completed", r.Scenario)
	require.NotNil(t, r.ClientCPU, "%s: no CPU per job", r.Scenario)
	require.NotNil(t, r.Ratio, "%s: no ratio to the ceiling", r.Scenario)
}

// The table has a × River column, before the note, on every row.
func TestTableRiverColumn(t *testing.T) {
	t.Parallel()
	ratio := 1.5
	var out bytes.Buffer
	printTable(&out, &report{Results: []result{
		{Scenario: "jobs-burn-16", Concurrency: 16, ItemsPerSec: 100, RatioToRiver: &ratio, Note: "a note"},
		{Scenario: riverBurnTuned, Concurrency: 16, Skipped: true, Note: "skipped: why"},
	}})
	require.Contains(t, out.String(), "re-run %  × River  note")
	f := tableRow(t, out.String(), "jobs-burn-16", "-")
	require.Equal(t, []string{"1.50", "a", "note"}, f[17:])
	f = tableRow(t, out.String(), riverBurnTuned, "-")
	require.Equal(t, []string{"-", "skipped:", "why"}, f[17:])
}

// --burn takes no negative number.
func TestBurnFlag(t *testing.T) {
	t.Parallel()
	out, code := help(t, "--burn", "-1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, out, "--burn", out)
}

// Every bunqueue jobs throughput row compares itself with river-burn-tuned,
// and the in-process latency rows with river-latency: compareWithRiver
// gives them the ratio, or River's percentiles, when those ran.
func TestCompareWithRiver(t *testing.T) {
	t.Parallel()
	all := scenarios()
	versus := map[string]string{}
	for _, s := range all {
		versus[s.name] = s.river
	}
	for _, name := range []string{"jobs-lock-b1", "jobs-lock-b50", "jobs-lease-b1", "jobs-defaults", "jobs-burn-16", "jobs-burn-defaults", "jobs-burn-lease-16"} {
		require.Equal(t, riverBurnTuned, versus[name], name)
	}
	for _, name := range []string{"latency", "latency-post-jobs"} {
		require.Equal(t, riverLatencyName, versus[name], name)
	}

	p50, p95, p99 := 1.0, 2.0, 3.0
	b := newBench("", io.Discard)
	rep := &report{}
	for _, r := range []result{
		{Scenario: riverBurnTuned, ItemsPerSec: 200},
		{Scenario: riverLatencyName, ItemsPerSec: 300, P50ms: &p50, P95ms: &p95, P99ms: &p99},
		{Scenario: "jobs-lock-b1", ItemsPerSec: 100},
		{Scenario: "latency", ItemsPerSec: 300, Note: "n"},
		{Scenario: "jobs-lease-b1", Skipped: true},
	} {
		b.results[r.Scenario] = r
		rep.Results = append(rep.Results, r)
	}
	b.compareWithRiver(all, rep)
	rows := map[string]result{}
	for _, r := range rep.Results {
		rows[r.Scenario] = r
	}
	require.NotNil(t, rows["jobs-lock-b1"].RatioToRiver)
	require.InDelta(t, 0.5, *rows["jobs-lock-b1"].RatioToRiver, 1e-9)
	require.Equal(t, "n; River in the same run (river-latency): p50 1.00 ms, p95 2.00 ms, p99 3.00 ms", rows["latency"].Note)
	require.Nil(t, rows["jobs-lease-b1"].RatioToRiver, "a skipped row")
	require.Nil(t, rows[riverBurnTuned].RatioToRiver, "River's own row")
	require.Equal(t, rows["jobs-lock-b1"], b.results["jobs-lock-b1"], "the rows the notes read are the same")

	// With --delay, each pass compares with its own River.
	rep = &report{}
	for _, r := range []result{
		{Scenario: riverBurnTuned, Delay: "0s", ItemsPerSec: 400},
		{Scenario: "jobs-burn-16", Delay: "0s", ItemsPerSec: 800},
		{Scenario: riverBurnTuned, Delay: "1ms", ItemsPerSec: 100},
		{Scenario: "jobs-burn-16", Delay: "1ms", ItemsPerSec: 300},
	} {
		rep.Results = append(rep.Results, r)
	}
	b.compareWithRiver(all, rep)
	require.InDelta(t, 2.0, *rep.Results[1].RatioToRiver, 1e-9, "0s against 0s")
	require.InDelta(t, 3.0, *rep.Results[3].RatioToRiver, 1e-9, "1ms against 1ms")
}
