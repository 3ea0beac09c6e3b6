package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildBinary builds the command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bunqueue")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
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
}
