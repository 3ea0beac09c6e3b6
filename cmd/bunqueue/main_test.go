package main

import (
	"os/exec"
	"path/filepath"
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
		require.Contains(t, stderr, "migrate")
	})

	// The bench is a command of its own: the help says where it went.
	t.Run("help points at bunqueue-bench", func(t *testing.T) {
		stdout, _, code := runBinary(t, bin, "help")
		require.Equal(t, exitOK, code)
		require.Contains(t, stdout, "bunqueue-bench")
		require.NotRegexp(t, `(?m)^\s+bench\s`, stdout, "bench is not a command of this tool")

		stdout, stderr, code := runBinary(t, bin, "bench")
		require.Equal(t, exitUsage, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, `unknown command "bench"`)
		require.Contains(t, stderr, "bunqueue-bench")
	})
}
