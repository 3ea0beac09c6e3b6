package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// raceBuild is set when the tests run with -race (race_test.go): the
// binary they run is then built with -race too.
var raceBuild bool

// buildBinary builds the command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bunqueue-bench")
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// runBinary runs bin with args and returns its stdout, stderr and exit code.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errOut.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// pgDSN returns the tests' PostgreSQL DSN changed by edit.
func pgDSN(t *testing.T, edit func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(dbtest.PGDSN())
	require.NoError(t, err)
	edit(u)
	return u.String()
}

func TestCommand(t *testing.T) {
	bin := buildBinary(t)

	t.Run("help", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "--help")
		require.Equal(t, exitOK, code)
		require.Contains(t, stderr, "Usage: bunqueue-bench")
		require.Contains(t, stderr, "-quick")
		require.NotContains(t, stderr, childCommand, "the internal subcommand is not in the usage text")
	})

	t.Run("unexpected argument", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "bench")
		require.Equal(t, exitUsage, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, `unexpected argument "bench"`)
		require.Contains(t, stderr, "Usage: bunqueue-bench")
	})

	t.Run("bench-child needs a mode", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, childCommand)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "internal")
	})

	t.Run("bad flag", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "--only", "nosuchscenario")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "nosuchscenario")
	})

	t.Run("bad delay", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "--delay", "0,fast")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "--delay")
		_, stderr, code = runBinary(t, bin, "--delay", "1ms", "--dsn", "root@unix(/run/mysqld/mysqld.sock)/test?parseTime=true")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "not tcp")
	})

	t.Run("bench ceiling", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "--duration", "300ms", "--only", "ceiling,fleet-lock-3x4", "--fleet-backlog", "200")
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		require.Contains(t, stdout, "tx/item  round trips/item  tx retries  failed batches  re-runs  re-run %")
		require.Contains(t, stdout, "tx/item: InnoDB's trx_rw_commits")
		for _, name := range []string{"ceiling-1", "ceiling-16", "fleet-lock-3x4"} {
			f := tableRow(t, stdout, name, "-")
			rate, err := strconv.ParseFloat(f[colItems], 64)
			require.NoError(t, err)
			require.Positive(t, rate, "%s: items/s", name)
			requirePositive(t, f[colTx], "%s: tx/item", name)
			require.Equal(t, "-", f[colRoundTrips], "%s: no round trips without --delay", name)
			conflicts := f[colConflicts : colConflicts+4]
			if name != "fleet-lock-3x4" {
				require.Equal(t, []string{"-", "-", "-", "-"}, conflicts, "%s: a plain-SQL row has no conflict columns", name)
				continue
			}
			for _, v := range conflicts[:3] { // tx retries, failed batches, re-runs
				_, err := strconv.ParseUint(v, 10, 64)
				require.NoError(t, err, "%s: not a count", name)
			}
			_, err = strconv.ParseFloat(conflicts[3], 64)
			require.NoError(t, err, "%s: re-run %% not a number", name)
		}
	})

	// Through the forwarder at 0 and 1 ms each way: each pass's pings,
	// and the rows' delay, round trips and CPU of the forwarder.
	t.Run("bench delay", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "--duration", "500ms", "--only", "ceiling-1", "--delay", "0,1ms")
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		require.Regexp(t, `delay 0s each way: SELECT 1 median [0-9.]+ ms through it, [0-9.]+ ms straight to the server \(200 pings each, 200 round trips counted through it\)`, stdout)
		require.Contains(t, stdout, "delay 1ms each way: SELECT 1 median")
		require.Contains(t, stderr, "the forwarder served")
		for _, delay := range []string{"0s", "1ms"} {
			f := tableRow(t, stdout, "ceiling-1", delay)
			requirePositive(t, f[colItems], "items/s at %s", delay)
			requirePositive(t, f[colTx], "tx/item at %s", delay)
			requireCeilingRoundTrips(t, f[colRoundTrips])
			require.Len(t, strings.Split(f[colCPU], "+"), 3, "client+server+proxy CPU at %s", delay)
		}
		requireNoProcess(t, bin)
	})

	// Every scenario added after the first version, very short, with the
	// baselines they pull in (the 16-connection ceiling, table-b1,
	// table-b50, jobs-lock-b1, jobs-lock-b50).
	t.Run("bench new scenarios", func(t *testing.T) {
		only := []string{"backlog-1m", "tracing-on", "table-defaults", "latency-xproc", "jobs-defaults",
			"post-burst-table", "post-burst-jobs", "memory-1k", "memory-1m", "post-burst-held",
			"write-only", "write-only-b50", "write-only-jobs", "write-only-jobs-b50", "design-bound", "design-bound-b50", "design-bound-jobs", "design-bound-prepared",
			"table-b1-prepared-handler", "table-b1-global-16", "table-b1-keys-100", "table-sized", "table-sized-global-16", "table-sized-keys-100", "rate-limit", "idle", "fleet-lock-3x4", "fleet-lock-3x16", "fleet-lease-3x4", "fleet-lease-3x16", "fleet-table-3x4", "fleet-table-3x16"}
		if batchFnScenario != nil {
			only = append(only, batchFnScenario.name)
		}
		// Half-second windows: in 300 ms a loaded machine saw no 50-row
		// transaction of design-bound-b50 commit.
		stdout, stderr, code := runBinary(t, bin, "--json", "--duration", "500ms",
			"--large", "20000", "--burst", "2000", "--fleet-backlog", "300", "--only", strings.Join(only, ","))
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		var rep report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		rows := map[string]result{}
		for _, r := range rep.Results {
			rows[r.Scenario] = r
			if !r.Skipped { // River's rows, which the jobs rows pull in
				require.Positive(t, r.RSSKiB, "%s: no RSS", r.Scenario)
			}
		}
		for _, name := range append(only, "ceiling-16", "table-b1", "table-b50", "jobs-lock-b1", "jobs-lock-b50") {
			r, ok := rows[name]
			require.True(t, ok, "no %s row in:\n%s", name, stdout)
			require.Positive(t, r.ItemsPerSec, "%s: no items/s", name)
			require.Positive(t, r.Concurrency, "%s: no concurrency", name)
		}
		require.Contains(t, rows["backlog-1m"].Note, "of table-b1")
		require.Contains(t, rows["table-b1-global-16"].Note, "of table-b1")
		require.Contains(t, rows["rate-limit"].Note, "of the limit")
		require.Contains(t, rows["table-sized-keys-100"].Note, "of table-sized")
		require.Contains(t, rows["tracing-on"].Note, "of table-b50")
		require.Contains(t, rows["tracing-on"].Note, "client CPU")
		// The server runs on this machine: both CPU figures are there, and
		// the transactions; no round trips without a forwarder.
		for _, name := range []string{"ceiling-16", "table-b1", "write-only", "write-only-jobs-b50", "tracing-on"} {
			require.NotNil(t, rows[name].ClientCPU, "%s: no client CPU", name)
			require.Positive(t, *rows[name].ClientCPU, "%s: client CPU", name)
			require.NotNil(t, rows[name].ServerCPU, "%s: no server CPU", name)
			require.NotNil(t, rows[name].TxPerItem, "%s: no tx/item", name)
			require.Nil(t, rows[name].RoundTrips, "%s: round trips without a forwarder", name)
			require.Empty(t, rows[name].Delay, name)
		}
		require.Nil(t, rows["latency-xproc"].ClientCPU, "a rate set by a producer has no CPU per item")
		require.Contains(t, rows["table-defaults"].Note, "of the best tuned per-item row")
		require.Contains(t, rows["jobs-defaults"].Note, "of the best tuned lock-mode row")
		require.NotNil(t, rows["table-defaults"].Ratio, "table-defaults: no ratio to the 16-connection ceiling")
		x := rows["latency-xproc"]
		require.NotNil(t, x.P50ms)
		require.NotNil(t, x.P95ms)
		require.NotNil(t, x.P99ms)
		require.Contains(t, x.Note, "PollInterval")
		require.Contains(t, rows["memory-1k"].Note, "VmHWM")
		require.Contains(t, rows["memory-1m"].Note, "of memory-1k")
		require.Contains(t, rows["post-burst-held"].Note, "read view")
		requireConflictColumns(t, rows)
		for _, name := range only {
			if strings.HasPrefix(name, "fleet-") {
				requireFleetHandledAll(t, rows[name], 300)
			}
		}
		require.Equal(t, 12, rows["fleet-lock-3x4"].Concurrency)
		require.Equal(t, 48, rows["fleet-table-3x16"].Concurrency)
	})
}

// Columns of the bench's table, as strings.Fields splits its rows.
const (
	colDelay      = 1
	colItems      = 3
	colCPU        = 10
	colTx         = 11
	colRoundTrips = 12
	colConflicts  = 13 // tx retries, failed batches, re-runs, re-run %
)

// tableRow returns the fields of the row of scenario name at delay ("-":
// without --delay) in the bench's table.
func tableRow(t *testing.T, table, name, delay string) []string {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= 18 && f[0] == name && f[colDelay] == delay {
			return f
		}
	}
	require.Fail(t, "no row", "no %s row at delay %s in:\n%s", name, delay, table)
	return nil
}

// requirePositive checks that the table's cell is a positive number.
func requirePositive(t *testing.T, cell string, msgAndArgs ...any) {
	t.Helper()
	v, err := strconv.ParseFloat(cell, 64)
	require.NoError(t, err, msgAndArgs...)
	require.Positive(t, v, msgAndArgs...)
}

// requireCeilingRoundTrips checks the round trips per item of a ceiling
// row: BEGIN, UPDATE, COMMIT, give or take the transactions in flight at
// the window's ends.
func requireCeilingRoundTrips(t *testing.T, cell string) {
	t.Helper()
	v, err := strconv.ParseFloat(cell, 64)
	require.NoError(t, err, "round trips/item %q", cell)
	require.InDelta(t, 3, v, 0.5, "round trips/item of a ceiling row")
}

// requireNoProcess checks that no process runs the binary bin any more:
// the bench stopped its forwarder's.
func requireNoProcess(t *testing.T, bin string) {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), bin) {
			require.Fail(t, "a process left running", "%s: %q", path, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// plainSQL reports whether the scenario name runs plain SQL, no bunqueue
// client.
func plainSQL(name string) bool {
	for _, p := range []string{"ceiling-", "write-only", "design-bound", "seed-baseline"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// requireConflictColumns checks that every row that ran bunqueue clients
// has its conflict counts, and that the plain-SQL rows and River's have
// none.
func requireConflictColumns(t *testing.T, rows map[string]result) {
	t.Helper()
	for name, r := range rows {
		if r.Skipped {
			continue
		}
		if plainSQL(name) || strings.HasPrefix(name, "river-") {
			require.Nil(t, r.TxRetries, name)
			require.Nil(t, r.Reruns, name)
			continue
		}
		for what, v := range map[string]*int64{"tx retries": r.TxRetries, "failed batches": r.FailedBatches, "handled": r.Handled, "re-runs": r.Reruns} {
			require.NotNil(t, v, "%s: no %s", name, what)
			require.GreaterOrEqual(t, *v, int64(0), "%s: %s", name, what)
		}
		require.NotNil(t, r.RerunShare, name)
	}
}

// requireFleetHandledAll checks that a fleet scenario handled each of its
// items: the backlog of n and what its producers enqueued, none left.
func requireFleetHandledAll(t *testing.T, r result, n int64) {
	t.Helper()
	require.Contains(t, r.Note, "none left", r.Scenario)
	require.NotContains(t, r.Note, "FAILED", r.Scenario)
	require.NotNil(t, r.Handled, r.Scenario)
	require.Greater(t, *r.Handled, n, "%s: the backlog and the producers' items", r.Scenario)
}
