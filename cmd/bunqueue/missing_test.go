package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// On a database without the jobs tables, each command that reads them
// says so once: where, what to run, and the server's own error, not the
// library's explanation nested inside the tool's.
func TestMissingTablesSaidOnce(t *testing.T) {
	t.Parallel()
	mysqlDB := dbtest.OpenMySQL(t, 2)
	mysqlName := dbtest.Name("bqcli_missing")
	dbtest.Exec(t, mysqlDB, "CREATE DATABASE "+mysqlName)
	t.Cleanup(func() { _, _ = mysqlDB.Exec("DROP DATABASE IF EXISTS " + mysqlName) })
	pgDB := dbtest.OpenPG(t, 2)
	pgName := dbtest.Name("bqcli_missing")
	dbtest.Exec(t, pgDB, "CREATE DATABASE "+pgName)
	t.Cleanup(func() { _, _ = pgDB.Exec("DROP DATABASE IF EXISTS " + pgName + " WITH (FORCE)") })

	for _, server := range []struct{ name, dsn, database string }{
		{"mysql", dsnFor(t, mysqlName), mysqlName},
		{"postgres", pgDSN(t, func(u *url.URL) { u.Path = "/" + pgName }), pgName},
	} {
		for _, args := range [][]string{{"stats"}, {"failed", "list"}, {"failed", "show", "1"}, {"failed", "retry", "1"}, {"failed", "delete", "1"}} {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append(args, "--dsn", server.dsn), &stdout, &stderr)
			out := stderr.String()
			require.Equal(t, exitError, code, "%s %v: %s", server.name, args, out)
			require.Equal(t, 1, strings.Count(out, "\n"), "%s %v: one line: %s", server.name, args, out)
			require.Contains(t, out, "bunqueue "+strings.Join(args[:min(2, len(args))], " ")+": ", "%s %v", server.name, args)
			require.Contains(t, out, server.database, "%s %v: where", server.name, args)
			require.Equal(t, 1, strings.Count(out, "migrate"), "%s %v: what to run, once: %s", server.name, args, out)
			require.NotContains(t, out, "bunqueue:", "%s %v: no library message nested in the tool's: %s", server.name, args, out)
			require.Regexp(t, `(?i)doesn't exist|does not exist`, out, "%s %v: the server's error", server.name, args)
		}
	}
}
