package bunqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type ownedArgs struct {
	Owner string `json:"owner"`
	N     int    `json:"n"`
	Fail  bool   `json:"fail,omitempty"`
}

func (ownedArgs) Kind() string { return "t_owned" }

// ownerRuns counts the handler runs of one client: by job id, and the
// jobs it ran of another owner.
type ownerRuns struct {
	mu     sync.Mutex
	byID   map[int64]int
	others []string
}

func (r *ownerRuns) worker(owner string) bunqueue.Worker[ownedArgs] {
	return bunqueue.WorkerFunc[ownedArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ownedArgs]) error {
		r.mu.Lock()
		r.byID[job.ID]++
		if job.Args.Owner != owner {
			r.others = append(r.others, job.Args.Owner)
		}
		r.mu.Unlock()
		if job.Args.Fail {
			return errors.New("fails for good")
		}
		return nil
	})
}

func (r *ownerRuns) ran() (runs, jobs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.byID {
		runs += n
	}
	return runs, len(r.byID)
}

// Two clients with Tables of their own, on pools of their own, in one
// database, run a jobs queue of the same name, with a GlobalLimit, one
// in lock mode and one in lease mode: each runs all of its jobs, once,
// and none of the other's; each sees only its own pauses, failed jobs
// and job listings, as does a dashboard over it; bunqueue's default
// tables hold none of their jobs. On PostgreSQL the second client's tables
// are in a schema of their own, under the default prefix.
func TestTablesKeepClientsApart(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		dbA, dbB := srv.Open(t, 0), srv.Open(t, 0)
		ta := bunqueue.Tables{Prefix: dbtest.Name("ta") + "_"}
		tb := bunqueue.Tables{Prefix: dbtest.Name("tb") + "_"}
		if srv.Name == "postgres" {
			tb = bunqueue.Tables{Schema: dbtest.Name("tbs")}
		}
		dbtest.DropTables(t, dbA, ta)
		dbtest.DropTables(t, dbA, tb)
		require.NoError(t, ta.Migrate(ctx, dbA))
		require.NoError(t, tb.Migrate(ctx, dbB))
		require.NoError(t, tb.Migrate(ctx, dbB), "again: a no-op")
		require.NoError(t, bunqueue.Migrate(ctx, dbA))

		queue := dbtest.Name("apart")
		runsA, runsB := &ownerRuns{byID: map[int64]int{}}, &ownerRuns{byID: map[int64]int{}}
		newOwned := func(db *bun.DB, tables bunqueue.Tables, mode bunqueue.JobMode, runs *ownerRuns, owner string) *bunqueue.Client {
			c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, JobQueues: map[string]bunqueue.JobQueueConfig{
				queue: {Mode: mode, Workers: 3, GlobalLimit: 2, PollInterval: 50 * time.Millisecond},
			}})
			require.NoError(t, err)
			require.NoError(t, bunqueue.AddWorker(c, runs.worker(owner)))
			return c
		}
		a := newOwned(dbA, ta, bunqueue.ModeLock, runsA, "a")
		b := newOwned(dbB, tb, bunqueue.ModeLease, runsB, "b")

		const jobs = 20
		for i := range jobs {
			_, err := a.Enqueue(ctx, dbA, ownedArgs{Owner: "a", N: i}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			_, err = b.Enqueue(ctx, dbB, ownedArgs{Owner: "b", N: i, Fail: i == 0}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1})
			require.NoError(t, err)
		}
		require.Zero(t, count(t, dbA, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "the default tables hold none")

		start(t, a)
		start(t, b)
		eventually(t, 30*time.Second, func() bool {
			_, na := runsA.ran()
			_, nb := runsB.ran()
			return na == jobs && nb == jobs
		}, "both clients ran their jobs")
		// The handler counts its run before the worker moves the job to
		// the failed jobs, in a statement of its own after it returns.
		var failed []bunqueue.FailedJob
		eventually(t, 10*time.Second, func() bool {
			var err error
			failed, err = b.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
			require.NoError(t, err)
			return len(failed) > 0
		}, "b's failed job moved to its failed jobs")
		require.Len(t, failed, 1, "b's failed job is b's")
		eventually(t, 10*time.Second, func() bool {
			return count(t, dbA, "SELECT COUNT(*) FROM "+ta.Names()[0]) == 0 && count(t, dbB, "SELECT COUNT(*) FROM "+tb.Names()[0]+" WHERE queue = ?", queue) == 0
		}, "every job left its jobs table")
		for _, r := range []*ownerRuns{runsA, runsB} {
			runs, n := r.ran()
			require.Equal(t, jobs, n)
			require.Equal(t, jobs, runs, "each job ran once")
			require.Empty(t, r.others, "no job of the other client")
		}

		failedA, err := a.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
		require.NoError(t, err)
		require.Empty(t, failedA, "a sees none of b's failed jobs")
		page, err := a.JobList(ctx, bunqueue.JobListFilter{Queue: queue})
		require.NoError(t, err)
		require.Empty(t, page.Jobs, "a lists none of b's jobs")
		page, err = b.JobList(ctx, bunqueue.JobListFilter{Queue: queue})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1, "b lists its failed job")

		require.NoError(t, a.PauseQueue(ctx, queue))
		pausedA, err := a.PausedQueues(ctx)
		require.NoError(t, err)
		require.Contains(t, pausedA, queue)
		pausedB, err := b.PausedQueues(ctx)
		require.NoError(t, err)
		require.NotContains(t, pausedB, queue, "a's pause is not b's")
		require.Zero(t, count(t, dbA, "SELECT COUNT(*) FROM bunqueue_slots WHERE queue = ?", queue), "the limits' slots are in the clients' tables")

		for client, want := range map[*bunqueue.Client]int{a: 0, b: 1} {
			srv := httptest.NewServer(dashboard.New(client, nil))
			res, err := http.Get(srv.URL + "/data.json")
			require.NoError(t, err)
			var data struct {
				FailedJobs []struct{ Queue string } `json:"failed_jobs"`
			}
			require.NoError(t, json.NewDecoder(res.Body).Decode(&data))
			res.Body.Close()
			srv.Close()
			n := 0
			for _, f := range data.FailedJobs {
				if f.Queue == queue {
					n++
				}
			}
			require.Equal(t, want, n, "the dashboard shows its client's failed jobs")
		}
	})
}

// Bad Tables are refused where they are given, naming the field; a schema
// is for PostgreSQL only.
func TestTablesRefused(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 1)
		for _, tc := range []struct {
			tables bunqueue.Tables
			want   string
		}{
			{bunqueue.Tables{Prefix: "Shop_"}, `Config.Tables.Prefix "Shop_" must be`},
			{bunqueue.Tables{Prefix: "shop-q_"}, `Config.Tables.Prefix "shop-q_" must be`},
			{bunqueue.Tables{Prefix: "1q_"}, `Config.Tables.Prefix "1q_" must be`},
			{bunqueue.Tables{Prefix: strings.Repeat("q", 41)}, "must be at most 40 bytes"},
			{bunqueue.Tables{Schema: "a.b"}, `Config.Tables.Schema "a.b" must be`},
		} {
			_, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tc.tables})
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, tc.tables.Migrate(t.Context(), db), strings.Replace(tc.want, "Config.", "", 1))
		}
		_, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: bunqueue.Tables{Schema: "queues"}})
		if srv.Name == "postgres" {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, `Config.Tables.Schema "queues": schemas are for PostgreSQL`)
		}
	})
}

// A client whose tables were not migrated says which tables, and how to
// migrate them.
func TestTablesNotMigrated(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		tables := bunqueue.Tables{Prefix: dbtest.Name("tn") + "_"}
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables})
		require.NoError(t, err)
		_, err = c.Enqueue(t.Context(), db, ownedArgs{Owner: "x"}, nil)
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		require.ErrorContains(t, err, "the jobs tables ("+tables.Prefix+"jobs, "+tables.Prefix+"failed_jobs) do not exist: run Config.Tables.Migrate, or `bunqueue migrate --prefix "+tables.Prefix+"`")
	})
}

// A client with Tables of its own needs no default tables: in a database
// that has none (a new SQLite file), its jobs queues start and run, in
// lock and lease mode, and it creates none of the default names.
func TestTablesAloneInTheirDatabase(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "alone.db"), 0)
	tables := bunqueue.Tables{Prefix: "shop_q_"}
	require.NoError(t, tables.Migrate(t.Context(), db))
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		runs := &ownerRuns{byID: map[int64]int{}}
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, PollInterval: 50 * time.Millisecond,
			JobQueues: map[string]bunqueue.JobQueueConfig{"q": {Mode: mode}}})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, runs.worker("a")))
		start(t, c)
		_, err = c.Enqueue(t.Context(), db, ownedArgs{Owner: "a"}, &bunqueue.EnqueueOpts{Queue: "q"})
		require.NoError(t, err)
		eventually(t, 10*time.Second, func() bool { _, n := runs.ran(); return n == 1 }, "the %s job ran", mode)
		require.NoError(t, c.Stop(t.Context()))
	}
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'bunqueue%'"), "no default table, index or probe")
}
