package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// cliTables reads the stats of queue through the tool, with args.
func cliStats(t *testing.T, bin string, env []string, queue string, args ...string) []queueStats {
	t.Helper()
	stdout, stderr, code := runWithEnv(t, env, bin, append([]string{"stats", "--json", "--queue", queue}, args...)...)
	require.Equal(t, exitOK, code, stderr)
	var rep struct {
		Queues []queueStats `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	return rep.Queues
}

// The tool works on the tables of --prefix (or $BUNQUEUE_TABLE_PREFIX),
// and of --schema on PostgreSQL: it migrates them, counts and pauses
// their queues, and leaves bunqueue's default tables alone; its errors
// name a bad prefix or a schema given for MySQL.
func TestTablesFlags(t *testing.T) {
	bin := buildBinary(t)
	for _, srv := range []struct {
		name   string
		dsn    string
		open   func(t testing.TB, maxConns int) *bun.DB
		tables bunqueue.Tables
		flags  []string
	}{
		{"mysql", dbtest.ServerDSN(), dbtest.OpenMySQL, bunqueue.Tables{Prefix: dbtest.Name("cli") + "_"}, nil},
		{"postgres", dbtest.PGDSN(), dbtest.OpenPG, bunqueue.Tables{Prefix: "q_", Schema: dbtest.Name("cli")}, nil},
	} {
		t.Run(srv.name, func(t *testing.T) {
			ctx := t.Context()
			db := srv.open(t, 2)
			flags := []string{"--dsn", srv.dsn, "--prefix", srv.tables.Prefix}
			if srv.tables.Schema != "" {
				flags = append(flags, "--schema", srv.tables.Schema)
			}
			dbtest.DropTables(t, db, srv.tables)

			stdout, stderr, code := runBinary(t, bin, append(flags[2:], "migrate", "--dsn", srv.dsn)...)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, srv.tables.String(), "it names the tables it migrated")

			queue := dbtest.Name("cliq")
			c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: srv.tables, JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
			require.NoError(t, err)
			for i := range 2 {
				_, err := c.Enqueue(ctx, db, cliArgsA{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
				require.NoError(t, err)
			}
			got := cliStats(t, bin, nil, queue, flags...)
			require.Len(t, got, 1)
			require.Equal(t, 2, got[0].Waiting)
			env := []string{"BUNQUEUE_TABLE_PREFIX=" + srv.tables.Prefix, "BUNQUEUE_TABLE_SCHEMA=" + srv.tables.Schema}
			fromEnv := cliStats(t, bin, env, queue, "--dsn", srv.dsn)
			require.Len(t, fromEnv, 1, "the same from the environment")
			require.Equal(t, 2, fromEnv[0].Waiting, "the same from the environment")
			require.NoError(t, bunqueue.Migrate(ctx, db))
			def := cliStats(t, bin, nil, queue, "--dsn", srv.dsn)
			require.Len(t, def, 1)
			require.Zero(t, def[0].Waiting+def[0].Scheduled+def[0].Failed, "the default tables hold none of them")

			_, stderr, code = runBinary(t, bin, append([]string{"queue", "pause", queue}, flags...)...)
			require.Equal(t, exitOK, code, stderr)
			paused, err := c.PausedQueues(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{queue}, paused)
			other, err := bunqueue.NewClient(db, nil)
			require.NoError(t, err)
			paused, err = other.PausedQueues(ctx)
			require.NoError(t, err)
			require.NotContains(t, paused, queue, "the default tables' pauses are others")
		})
	}

	t.Run("migrate --sql", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "migrate", "--sql", "--prefix", "shop_q_")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, bunqueue.Tables{Prefix: "shop_q_"}.MigrationSQL(), stdout)
		require.Contains(t, stdout, "CREATE TABLE IF NOT EXISTS shop_q_jobs")
		require.NotContains(t, stdout, "bunqueue_jobs")
		stdout, stderr, code = runBinary(t, bin, "migrate", "--sql", "--schema", "shop", "--dsn", dbtest.PGDSN())
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "CREATE SCHEMA shop")
		require.Contains(t, stdout, "CREATE TABLE IF NOT EXISTS shop.bunqueue_jobs")
		require.Equal(t, 0, strings.Count(stdout, " bunqueue_jobs "), "every name is in the schema")
	})

	t.Run("refused", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "stats", "--dsn", dbtest.ServerDSN(), "--schema", "shop")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, `--schema "shop": schemas are for PostgreSQL`)
		_, stderr, code = runBinary(t, bin, "migrate", "--sql", "--prefix", "Shop")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, `Prefix "Shop" must be at most 40 bytes of lowercase letters`)
	})
}
