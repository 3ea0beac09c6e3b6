package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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

// help returns what `bunqueue args...` prints, with its exit code.
func help(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr)
	return stdout.String() + stderr.String(), code
}

// The help and the package doc say the same of each command, and what
// they say of the servers is what runs: every command takes a PostgreSQL
// DSN.
func TestHelpSaysWhatRuns(t *testing.T) {
	t.Parallel()
	out, code := help(t, "--help")
	require.Equal(t, exitOK, code)
	doc := packageDoc(t)

	listed := regexp.MustCompile(`(?m)^\s+(\w+)\s{2,}(.+)$`)
	summaries := func(text string) map[string]string {
		m := map[string]string{}
		for _, l := range listed.FindAllStringSubmatch(text, -1) {
			m[l[1]] = strings.TrimSpace(l[2])
		}
		return m
	}
	want := map[string]string{"help": "print this help"}
	for _, c := range commands() {
		want[c.name] = c.summary
	}
	require.Equal(t, want, summaries(out), "the help lists the commands")
	require.Equal(t, want, summaries(doc), "the package doc lists the same commands as the help")

	for what, text := range map[string]string{"help": out, "package doc": doc} {
		flat := strings.Join(strings.Fields(text), " ")
		require.Contains(t, flat, "Every command works on both.", "%s: the servers", what)
		require.NotRegexp(t, `(?i)but bench|bench (works|runs) only|MySQL 8 / MariaDB server`, flat, "%s: no command is said to need MySQL", what)
	}
	for _, c := range commands() {
		out, code := help(t, c.name, "-h")
		if c.name == "failed" {
			out, code = help(t, "failed", "list", "-h")
		}
		require.Equal(t, exitOK, code, c.name)
		require.Contains(t, out, "postgres:// URL for PostgreSQL", "%s -h: its --dsn takes a PostgreSQL URL", c.name)
	}
}

// The help, the package doc and docs/cli.md say the same of where --dsn
// and --json go and of where the DSN comes from; docs/cli.md says how to
// install the tool.
func TestHelpAndDocsAgree(t *testing.T) {
	t.Parallel()
	out, code := help(t, "--help")
	require.Equal(t, exitOK, code)
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	for what, text := range map[string]string{"help": out, "package doc": packageDoc(t), "docs/cli.md": string(docs)} {
		flat := strings.Join(strings.Fields(text), " ")
		require.Contains(t, flat, "bunqueue [--dsn DSN] [--prefix P] [--schema S] [--json] <command> [flags]", "%s: the usage line", what)
		require.Contains(t, flat, "tables are, by default, "+tablesList()+".", "%s: the tables, as bunqueue.Tables lists them", what)
		require.Regexp(t, "--prefix`? \\(else `?\\$BUNQUEUE_TABLE_PREFIX`?\\) and `?--schema`? \\(else `?\\$BUNQUEUE_TABLE_SCHEMA", flat, "%s: the tables' flags", what)
		require.Contains(t, flat, "before or after the command", "%s: where --dsn and --json go", what)
		require.Regexp(t, `--dsn.*BUNQUEUE_DSN.*older names.*BUNQUEUE_MYSQL_DSN.*then.*BUNQUEUE_PG_DSN`, flat,
			"%s: the DSN's sources, in the order they are read", what)
		require.Regexp(t, `postgres://.*postgresql://.*PostgreSQL.*MySQL or MariaDB`, flat, "%s: the DSN names the server", what)
	}
	require.Contains(t, string(docs), "go install "+toolPackage+"@latest", "docs/cli.md: how to install the tool")
	require.Contains(t, string(docs), "go get -tool "+toolPackage+"@", "docs/cli.md: how an app pins it")
}
