package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

func TestResolveDSN(t *testing.T) {
	t.Parallel()
	const my, pg, other = "u@tcp(h:3306)/db", "postgres://u@h/db", "v@tcp(h:3306)/other"
	for _, tc := range []struct {
		name        string
		flag        string
		env         map[string]string
		dsn, source string
	}{
		{"flag first", my, map[string]string{"BUNQUEUE_DSN": pg}, my, "from --dsn"},
		{"BUNQUEUE_DSN before the older names", "", map[string]string{"BUNQUEUE_DSN": pg, "BUNQUEUE_MYSQL_DSN": my, "BUNQUEUE_PG_DSN": other}, pg, "from BUNQUEUE_DSN"},
		{"then BUNQUEUE_MYSQL_DSN", "", map[string]string{"BUNQUEUE_MYSQL_DSN": pg, "BUNQUEUE_PG_DSN": other}, pg, "from BUNQUEUE_MYSQL_DSN"},
		{"then BUNQUEUE_PG_DSN, whatever it holds", "", map[string]string{"BUNQUEUE_PG_DSN": my}, my, "from BUNQUEUE_PG_DSN"},
		{"an empty variable is not set", "", map[string]string{"BUNQUEUE_DSN": "", "BUNQUEUE_PG_DSN": pg}, pg, "from BUNQUEUE_PG_DSN"},
		{"else the default", "", nil, defaultDSN, "the default, " + defaultDSN},
	} {
		dsn, source := resolveDSN(tc.flag, func(name string) string { return tc.env[name] })
		require.Equal(t, tc.dsn, dsn, tc.name)
		require.Equal(t, tc.source, source, tc.name)
	}
}

// The DSN comes from BUNQUEUE_DSN, else the older names, each of which
// may hold either server's DSN: the DSN, not the variable, names the
// server. An error names the variable the DSN came from.
func TestDSNVariables(t *testing.T) {
	bin := buildBinary(t)
	const deadMySQL = "root@tcp(127.0.0.1:1)/test"
	const deadPG = "postgres://postgres@127.0.0.1:1/test?sslmode=disable"
	pgSQL := migrate.Postgres(tables.Default).SQL(sqldialect.Postgres{}, "PostgreSQL 12+")

	t.Run("the server comes from the DSN", func(t *testing.T) {
		for _, tc := range []struct {
			env  []string
			want string
		}{
			{[]string{"BUNQUEUE_DSN=" + deadPG, "BUNQUEUE_MYSQL_DSN=" + deadMySQL}, pgSQL},
			{[]string{"BUNQUEUE_DSN=" + deadMySQL, "BUNQUEUE_PG_DSN=" + deadPG}, bunqueue.MigrationSQL()},
			{[]string{"BUNQUEUE_MYSQL_DSN=" + deadPG}, pgSQL},
			{[]string{"BUNQUEUE_PG_DSN=" + deadMySQL}, bunqueue.MigrationSQL()},
			{[]string{"BUNQUEUE_PG_DSN=" + deadPG}, pgSQL},
			{nil, bunqueue.MigrationSQL()},
		} {
			stdout, stderr, code := runWithEnv(t, tc.env, bin, "migrate", "--sql")
			require.Equal(t, exitOK, code, "%v: %s", tc.env, stderr)
			require.Equal(t, tc.want, stdout, "%v", tc.env)
		}
	})

	t.Run("errors name the variable", func(t *testing.T) {
		for _, name := range dsnVariables() {
			for _, dsn := range []string{deadMySQL, deadPG} {
				_, stderr, code := runWithEnv(t, []string{name + "=" + dsn}, bin, "stats")
				require.Equal(t, exitError, code, "%s=%s", name, dsn)
				require.Contains(t, stderr, "cannot connect to", "%s=%s", name, dsn)
				require.Contains(t, stderr, "127.0.0.1:1", "%s=%s", name, dsn)
				require.Contains(t, stderr, "(DSN from "+name+")", "%s=%s", name, dsn)
				require.Contains(t, stderr, "--dsn or BUNQUEUE_DSN", "%s=%s", name, dsn)
			}
			_, stderr, code := runWithEnv(t, []string{name + "=not a dsn"}, bin, "failed", "list")
			require.Equal(t, exitError, code, name)
			require.Contains(t, stderr, "not valid", name)
			require.Contains(t, stderr, "from "+name, name)
		}
	})

	t.Run("on a server", func(t *testing.T) {
		dsn := dbtest.Scratch(t, "bqcli_dsnvars")
		_, stderr, code := runWithEnv(t, []string{"BUNQUEUE_DSN=" + dsn}, bin, "migrate")
		require.Equal(t, exitOK, code, stderr)
		for _, env := range [][]string{
			{"BUNQUEUE_DSN=" + dsn, "BUNQUEUE_MYSQL_DSN=" + deadMySQL, "BUNQUEUE_PG_DSN=" + deadPG},
			{"BUNQUEUE_MYSQL_DSN=" + dsn, "BUNQUEUE_PG_DSN=" + deadPG},
			{"BUNQUEUE_PG_DSN=" + dsn},
		} {
			stdout, stderr, code := runWithEnv(t, env, bin, "--json", "stats")
			require.Equal(t, exitOK, code, "%v: %s", env, stderr)
			require.Contains(t, stdout, "{", "%v", env)
		}
		_, stderr, code = runWithEnv(t, []string{"BUNQUEUE_DSN=" + deadMySQL}, bin, "--dsn", dsn, "stats")
		require.Equal(t, exitOK, code, "--dsn before the variables: %s", stderr)
	})
}
