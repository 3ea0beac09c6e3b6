package bunqueue_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// processChildEnv, set, makes the test binary a process of the registry
// test (runProcessChild): its value is a processChild as JSON.
const processChildEnv = "BQ_PROCESS_CHILD"

// processChild is what the registry test's child process runs.
type processChild struct {
	Name   string          `json:"name"`
	Tables bunqueue.Tables `json:"tables"`
	Queue  string          `json:"queue"`
	Every  time.Duration   `json:"every"`
}

// runProcessChild starts a client of one jobs queue that registers as
// its Name, and runs until its stdin closes or it is killed.
func runProcessChild() int {
	var cfg processChild
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := json.Unmarshal([]byte(os.Getenv(processChildEnv)), &cfg); err != nil {
		log.Error("config", "error", err)
		return 2
	}
	db, err := dbtest.OpenDB()
	if err != nil {
		log.Error("open", "error", err)
		return 2
	}
	c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: log, Tables: cfg.Tables, ProcessName: cfg.Name, HeartbeatInterval: cfg.Every,
		JobQueues: map[string]bunqueue.JobQueueConfig{cfg.Queue: {Workers: 2}}})
	if err == nil {
		err = bunqueue.AddWorker(c, bunqueue.WorkerFunc[ownedArgs](func(context.Context, bun.IDB, *bunqueue.Job[ownedArgs]) error { return nil }))
	}
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		log.Error("start", "error", err)
		return 2
	}
	_, _ = os.Stdin.Read(make([]byte, 1)) // until the test ends, or a kill
	return 0
}

// registered returns the processes c's registry lists, by name.
func registered(t *testing.T, c *bunqueue.Client) map[string]bunqueue.Process {
	t.Helper()
	ps, err := c.Processes(t.Context())
	require.NoError(t, err)
	out := map[string]bunqueue.Process{}
	for _, p := range ps {
		out[p.Name] = p
	}
	return out
}

// Three clients on pools of their own, as three app servers, each see the
// same registry: the three processes, live, with their queues and
// workers, each marking itself; a pause shows in every process's queue
// within a heartbeat of its poll; a stopped client's row is gone when
// Stop returns.
func TestProcessRegistry(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		tables := bunqueue.Tables{Prefix: dbtest.Name("pr") + "_"}
		admin := srv.Open(t, 0)
		dbtest.DropTables(t, admin, tables)
		require.NoError(t, tables.Migrate(ctx, admin))
		queue := dbtest.Name("procq")
		names := []string{"app-1", "app-2", "app-3"}
		clients := make([]*bunqueue.Client, len(names))
		for i, name := range names {
			c, err := bunqueue.NewClient(srv.Open(t, 0), &bunqueue.Config{Tables: tables, ProcessName: name,
				HeartbeatInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond,
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: i + 1, GlobalLimit: 5}}})
			require.NoError(t, err)
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ownedArgs](func(context.Context, bun.IDB, *bunqueue.Job[ownedArgs]) error { return nil })))
			clients[i] = c
		}
		before, err := clients[0].Processes(ctx)
		require.NoError(t, err)
		require.Empty(t, before, "no client started yet")
		for _, c := range clients {
			start(t, c)
		}
		for i, c := range clients {
			var ps map[string]bunqueue.Process
			eventually(t, 10*time.Second, func() bool { ps = registered(t, c); return len(ps) == len(names) }, "client %d sees the three processes", i)
			for j, name := range names {
				p := ps[name]
				require.False(t, p.Stale, "%s is live", name)
				require.Equal(t, i == j, p.This, "%s, seen by client %d", name, i)
				require.NotEmpty(t, p.Host)
				require.Positive(t, p.PID)
				require.Len(t, p.Queues, 1)
				require.Equal(t, bunqueue.ProcessQueue{Name: queue, Kind: bunqueue.QueueKindJobs, Mode: "lock", Workers: j + 1, GlobalLimit: 5}, p.Queues[0])
				require.False(t, p.HeartbeatAt.Before(p.StartedAt))
			}
		}

		require.NoError(t, clients[0].PauseQueue(ctx, queue))
		for i, c := range clients {
			eventually(t, 10*time.Second, func() bool {
				for _, p := range registered(t, c) {
					if !p.Queues[0].Paused {
						return false
					}
				}
				return true
			}, "client %d sees the queue paused in every process", i)
		}

		require.NoError(t, clients[2].Stop(ctx))
		ps := registered(t, clients[0])
		require.Len(t, ps, 2, "the stopped client's row is gone")
		require.NotContains(t, ps, names[2])
	})
}

// A process killed with SIGKILL goes stale within ProcessStaleBeats of
// its heartbeats, by the database clock, and stays listed, marked stale;
// a live process never does.
func TestProcessRegistrySIGKILL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tables := bunqueue.Tables{Prefix: dbtest.Name("pk") + "_"}
	db := dbtest.Open(t, 0)
	dbtest.DropTables(t, db, tables)
	require.NoError(t, tables.Migrate(ctx, db))
	every := 200 * time.Millisecond
	watcher, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, ProcessName: "watcher", HeartbeatInterval: every})
	require.NoError(t, err)
	start(t, watcher)

	exe, err := os.Executable()
	require.NoError(t, err)
	child := processChild{Name: "victim", Tables: tables, Queue: dbtest.Name("pkq"), Every: every}
	js, err := json.Marshal(child)
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), processChildEnv+"="+string(js))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })

	eventually(t, 20*time.Second, func() bool { _, ok := registered(t, watcher)["victim"]; return ok }, "the child registers")
	victim := registered(t, watcher)["victim"]
	require.False(t, victim.Stale, "live: its row was just written")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed := time.Now()
	eventually(t, 30*time.Second, func() bool { return registered(t, watcher)["victim"].Stale }, "the killed process goes stale")
	// It went stale no sooner than its last heartbeat's stale time: at
	// least one interval's worth of beats it could not send, after the
	// kill, were missed (the last beat may have come just before it).
	require.GreaterOrEqual(t, time.Since(killed), every, "stale only once its heartbeats stopped")
	ps := registered(t, watcher)
	require.Equal(t, victim.ID, ps["victim"].ID, "listed, marked stale, until ProcessForgetAfter")
	require.False(t, ps["watcher"].Stale, "the live process is not")
	live := 0
	for _, p := range ps {
		if !p.Stale {
			live++
		}
	}
	require.Equal(t, 1, live, "the live list: the watcher alone")
}
