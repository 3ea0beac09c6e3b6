package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// packageDoc returns the doc comment of this command's package, as go doc
// prints it.
func packageDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc)
	return f.Doc.Text()
}

// help returns what `bunqueue-bench args...` prints, with its exit code.
func help(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr)
	return stdout.String() + stderr.String(), code
}

// The help and the package doc say what runs: the bench takes a
// PostgreSQL DSN (TestBenchPostgres runs it there), and neither says it
// needs MySQL.
func TestHelpSaysWhatRuns(t *testing.T) {
	t.Parallel()
	out, code := help(t, "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "postgres:// URL for PostgreSQL", "-h: --dsn takes a PostgreSQL URL")
	doc := packageDoc(t)
	require.Contains(t, strings.Join(strings.Fields(doc), " "), "It works on both.", "package doc: the servers")
	for what, text := range map[string]string{"help": out, "package doc": doc} {
		flat := strings.Join(strings.Fields(text), " ")
		require.Contains(t, flat, "Usage: bunqueue-bench [--quick]", "%s: the command's name", what)
		require.NotRegexp(t, `(?i)but bench|bench (works|runs) only|MySQL 8 / MariaDB server`, flat, "%s: the bench is not said to need MySQL", what)
	}
}

// --quick's help and docs/performance.md give the same time for a quick
// run (4 min 20 s on MariaDB 10.11 here, 2026-12-02, measured with
// `time bunqueue bench --quick`).
func TestQuickRunTimeAgrees(t *testing.T) {
	t.Parallel()
	out, code := help(t, "-h")
	require.Equal(t, exitOK, code)
	minutes := regexp.MustCompile(`about (\w+) minutes`)
	flag := minutes.FindStringSubmatch(out[strings.Index(out, "-quick"):])
	require.NotNil(t, flag, "-h: --quick says how long it takes")
	doc, err := os.ReadFile("../../docs/performance.md")
	require.NoError(t, err)
	quick := regexp.MustCompile("bunqueue-bench --quick` \\(about (\\w+) minutes").FindSubmatch(doc)
	require.NotNil(t, quick, "docs/performance.md says how long --quick takes")
	require.Equal(t, flag[1], string(quick[1]), "--quick's time: -h and docs/performance.md")
}
