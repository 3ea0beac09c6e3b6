package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// processes lists the registry of the tables of --prefix: a started
// client, its queue and workers, live; and, once it stopped, nothing.
func TestProcessesCommand(t *testing.T) {
	bin := buildBinary(t)
	ctx := t.Context()
	db := dbtest.OpenMySQL(t, 8)
	tables := bunqueue.Tables{Prefix: dbtest.Name("clip") + "_"}
	dbtest.DropTables(t, db, tables)
	require.NoError(t, tables.Migrate(ctx, db))
	c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, ProcessName: "web-1", HeartbeatInterval: time.Second,
		JobQueues: map[string]bunqueue.JobQueueConfig{"mail": {Workers: 3}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[cliArgsA](func(context.Context, bun.IDB, *bunqueue.Job[cliArgsA]) error { return nil })))
	require.NoError(t, c.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	})
	flags := []string{"--dsn", dbtest.ServerDSN(), "--prefix", tables.Prefix}

	var got struct {
		Processes []bunqueue.Process `json:"processes"`
	}
	require.Eventually(t, func() bool {
		stdout, _, code := runBinary(t, bin, append([]string{"processes", "--json"}, flags...)...)
		return code == exitOK && json.Unmarshal([]byte(stdout), &got) == nil && len(got.Processes) == 1
	}, 20*time.Second, 50*time.Millisecond, "the started client is registered")
	p := got.Processes[0]
	require.Equal(t, "web-1", p.Name)
	require.False(t, p.Stale)
	require.Equal(t, []bunqueue.ProcessQueue{{Name: "mail", Kind: bunqueue.QueueKindJobs, Mode: "lock", Workers: 3}}, p.Queues)

	stdout, stderr, code := runBinary(t, bin, append([]string{"processes"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "web-1")
	require.Contains(t, stdout, "3 workers")
	require.Contains(t, stdout, "1 live, 0 stale")

	require.NoError(t, c.Stop(ctx))
	stopped = true
	stdout, stderr, code = runBinary(t, bin, append([]string{"processes"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "no processes")
}
