package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// raceBuild is set when the tests run with -race (race_test.go): the
// binary they run is then built with -race too.
var raceBuild bool

// buildBinary builds the command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bunqueue")
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
	return runWithEnv(t, nil, bin, args...)
}

func TestCommand(t *testing.T) {
	bin := buildBinary(t)

	t.Run("unknown subcommand", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "frobnicate")
		require.Equal(t, exitUsage, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, `unknown command "frobnicate"`)
		require.Contains(t, stderr, "bench")
	})

	t.Run("help lists bench", func(t *testing.T) {
		stdout, _, code := runBinary(t, bin, "help")
		require.Equal(t, exitOK, code)
		require.Contains(t, stdout, "bench")
		require.NotContains(t, stdout, childCommand, "the internal subcommand is not in the usage text")
	})

	t.Run("bench-child needs a mode", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, childCommand)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "internal")
	})

	t.Run("bad flag", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "bench", "--only", "nosuchscenario")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "nosuchscenario")
	})

	t.Run("bench ceiling", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "bench", "--duration", "300ms", "--only", "ceiling")
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		for _, name := range []string{"ceiling-1", "ceiling-16"} {
			rate := -1.0
			for _, line := range strings.Split(stdout, "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[0] == name {
					var err error
					rate, err = strconv.ParseFloat(f[2], 64)
					require.NoError(t, err, line)
				}
			}
			require.Positive(t, rate, "no %s row with a positive items/s in:\n%s", name, stdout)
		}
	})

	// Every scenario added after the first version, very short, with the
	// baselines they pull in (the 16-connection ceiling, table-b1,
	// table-b50, jobs-lock-b1, jobs-lock-b50).
	t.Run("bench new scenarios", func(t *testing.T) {
		only := []string{"backlog-1m", "tracing-on", "table-defaults", "latency-xproc", "jobs-defaults",
			"post-burst-table", "post-burst-jobs", "memory-1k", "memory-1m", "post-burst-held",
			"write-only", "write-only-b50", "write-only-jobs", "write-only-jobs-b50", "design-bound", "design-bound-b50", "design-bound-jobs", "design-bound-prepared",
			"table-b1-prepared-handler"}
		if batchFnScenario != nil {
			only = append(only, batchFnScenario.name)
		}
		stdout, stderr, code := runBinary(t, bin, "bench", "--json", "--duration", "300ms",
			"--large", "20000", "--burst", "2000", "--only", strings.Join(only, ","))
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		var rep report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		rows := map[string]result{}
		for _, r := range rep.Results {
			rows[r.Scenario] = r
			require.Positive(t, r.RSSKiB, "%s: no RSS", r.Scenario)
		}
		for _, name := range append(only, "ceiling-16", "table-b1", "table-b50", "jobs-lock-b1", "jobs-lock-b50") {
			r, ok := rows[name]
			require.True(t, ok, "no %s row in:\n%s", name, stdout)
			require.Positive(t, r.ItemsPerSec, "%s: no items/s", name)
			require.Positive(t, r.Concurrency, "%s: no concurrency", name)
		}
		require.Contains(t, rows["backlog-1m"].Note, "of table-b1")
		require.Contains(t, rows["tracing-on"].Note, "of table-b50")
		require.Contains(t, rows["tracing-on"].Note, "client CPU")
		// The server runs on this machine: both CPU figures are there.
		for _, name := range []string{"ceiling-16", "table-b1", "write-only", "write-only-jobs-b50", "tracing-on"} {
			require.NotNil(t, rows[name].ClientCPU, "%s: no client CPU", name)
			require.Positive(t, *rows[name].ClientCPU, "%s: client CPU", name)
			require.NotNil(t, rows[name].ServerCPU, "%s: no server CPU", name)
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
	})
}
