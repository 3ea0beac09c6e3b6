package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// runCLI runs the tool in this process with args and returns its stdout,
// stderr and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// --dsn and --json go before or after the command, on every command; a
// flag after the command wins.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	dsn := dbtest.Scratch(t, "bqcli_flags")
	_, stderr, code := runCLI(t, "--dsn", dsn, "migrate")
	require.Equal(t, exitOK, code, stderr)

	for _, args := range [][]string{
		{"--dsn", dsn, "stats", "--json"},
		{"--json", "stats", "--dsn", dsn},
		{"--dsn=" + dsn, "--json", "stats", "--queue", "nosuchqueue"},
		{"-dsn", dsn, "-json", "migrate"},
		{"--dsn", dsn, "--json", "failed", "list", "--limit", "5"},
		{"--dsn", dsn, "--json", "job", "list"},
		{"--json", "--dsn", dsn, "queue", "list"},
		{"--dsn", dsn, "--json", "job", "get", "999999999999"},
		{"--json", "job", "get", "999999999999", "--dsn", dsn},
	} {
		stdout, stderr, code := runCLI(t, args...)
		want := exitOK
		if slices.Contains(args, "get") {
			want = exitNotFound
		}
		require.Equal(t, want, code, "%v: %s", args, stderr)
		require.True(t, json.Valid([]byte(stdout)), "%v: JSON: %s", args, stdout)
	}

	t.Run("after the command wins", func(t *testing.T) {
		dead := "root@tcp(127.0.0.1:1)/test"
		_, stderr, code := runCLI(t, "--dsn", dead, "stats", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		_, stderr, code = runCLI(t, "--dsn", dsn, "failed", "list", "--dsn", dead)
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "127.0.0.1:1")
		stdout, stderr, code := runCLI(t, "--json", "stats", "--dsn", dsn, "--json=false")
		require.Equal(t, exitOK, code, stderr)
		require.False(t, json.Valid([]byte(stdout)), "text, not JSON: %s", stdout)
	})

	t.Run("usage errors say what is wrong", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			says []string
			code int
		}{
			{[]string{"--queue", "q", "stats"}, []string{"flag provided but not defined: -queue", "go after it", "Usage: bunqueue"}, exitUsage},
			{[]string{"--dsn"}, []string{"flag needs an argument: -dsn"}, exitUsage},
			{[]string{"--dsn", dsn}, []string{"Usage: bunqueue"}, exitUsage},
			{[]string{"--dsn", dsn, "frobnicate"}, []string{`unknown command "frobnicate"`}, exitUsage},
			{[]string{"--dsn", dsn, "failed"}, []string{"Usage: bunqueue failed"}, exitUsage},
			{[]string{"--json", "job", "frob"}, []string{`unknown subcommand "frob"`}, exitUsage},
			{[]string{"--dsn", dsn, "stats", "--nosuchflag"}, []string{"flag provided but not defined: -nosuchflag"}, exitUsage},
			{[]string{"--dsn", dsn, "stats", "extra"}, []string{`unexpected argument "extra"`}, exitUsage},
			{[]string{"--dsn", dsn, "--help"}, []string{"Usage: bunqueue [--dsn DSN] [--prefix P] [--schema S] [--json] <command>"}, exitOK},
			{[]string{"--json", "failed", "--help"}, []string{"Usage: bunqueue failed"}, exitOK},
		} {
			stdout, stderr, code := runCLI(t, tc.args...)
			require.Equal(t, tc.code, code, "%v: %s%s", tc.args, stdout, stderr)
			for _, s := range tc.says {
				require.Contains(t, stdout+stderr, s, "%v", tc.args)
			}
			require.NotContains(t, stdout+stderr, dsn, "%v: the DSN is not printed back", tc.args)
		}
	})
}
