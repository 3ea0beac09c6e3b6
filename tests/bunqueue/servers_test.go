package bunqueue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of this file run the engine on every supported server
// (dbtest.Servers): a queue over an app's table, the jobs table in both
// modes with retries, the failed jobs and their replay, and timeouts.

// onServers runs test once per server, as a subtest named after it. The
// suite's PostgreSQL pass (BUNQUEUE_TEST_SERVER=postgres) skips it: the
// default pass runs it on every server already.
func onServers(t *testing.T, test func(t *testing.T, srv dbtest.Server)) {
	t.Parallel()
	if dbtest.IsPostgres() {
		t.Skip("run on every server by the default pass (without BUNQUEUE_TEST_SERVER)")
	}
	for _, srv := range dbtest.Servers() {
		t.Run(srv.Name, func(t *testing.T) {
			t.Parallel()
			test(t, srv)
		})
	}
}

// srvTable creates a table, and its extra indexes, with DDL that every
// server takes; it is dropped when the test ends.
func srvTable(t *testing.T, db *bun.DB, name, columns string, indexes ...string) {
	t.Helper()
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS "+name, "CREATE TABLE "+name+" ("+columns+")")
	for i, cols := range indexes {
		dbtest.Exec(t, db, fmt.Sprintf("CREATE INDEX %s_%d ON %s (%s)", name, i, name, cols))
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + name) })
}

type srvItem struct {
	bun.BaseModel `bun:"table:bq_srv_item"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
}

// overlaps records handler runs, and counts the runs of one item that
// overlapped another's.
type overlaps struct {
	mu      sync.Mutex
	running map[int64]bool
	twice   int
}

func (o *overlaps) run(id int64) func() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == nil {
		o.running = map[int64]bool{}
	}
	if o.running[id] {
		o.twice++
	}
	o.running[id] = true
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.running, id)
	}
}

// A queue over an app's table, two clients of four workers: every row is
// processed, its effect committed exactly once, never by two workers at
// once; failing rows are recorded by OnError, their writes undone.
func TestServersTableQueue(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		srvTable(t, db, "bq_srv_item", "id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0", "status, id")
		srvTable(t, db, "bq_srv_effect", "item BIGINT NOT NULL")
		const rows = 1000
		values := make([]string, rows)
		for i := range values {
			values[i] = fmt.Sprintf("(%d)", i+1)
		}
		bad := func(id int64) bool { return id%97 == 0 }
		var o overlaps
		newQueue := func() *bunqueue.Queue[srvItem] {
			return bunqueue.NewQueue("srv-items", func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("status = 'waiting'").Order("id")
			}, func(ctx context.Context, tx bun.Tx, it *srvItem) error {
				defer o.run(it.ID)()
				if _, err := tx.NewRaw("INSERT INTO bq_srv_effect (item) VALUES (?)", it.ID).Exec(ctx); err != nil {
					return err
				}
				if bad(it.ID) {
					return errors.New("bad row (test)")
				}
				_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
				return err
			}, &bunqueue.QueueConfig[srvItem]{
				OnError: func(ctx context.Context, tx bun.Tx, it *srvItem, _ error) error {
					_, err := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
					return err
				},
			})
		}
		// Both start before the rows exist: on SQLite, one writer at a
		// time, a Start's probe behind a busy client's writes can outwait
		// the busy timeout on a loaded machine.
		start(t, newClient(t, db, newQueue()))
		start(t, newClient(t, srv.Open(t, 0), newQueue()))
		dbtest.Exec(t, db, "INSERT INTO bq_srv_item (id) VALUES "+strings.Join(values, ", "))
		eventually(t, time.Minute, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_srv_item WHERE status = 'waiting'") == 0
		}, "every row left the queue")
		failed := rows / 97
		require.Equal(t, rows-failed, count(t, db, "SELECT COUNT(*) FROM bq_srv_item WHERE status = 'done'"))
		require.Equal(t, failed, count(t, db, "SELECT COUNT(*) FROM bq_srv_item WHERE status = 'failed' AND attempts = 1"))
		require.Equal(t, rows-failed, count(t, db, "SELECT COUNT(*) FROM bq_srv_effect"), "one effect per done row; the failed rows' undone")
		require.Equal(t, rows-failed, count(t, db, "SELECT COUNT(DISTINCT item) FROM bq_srv_effect"), "no effect twice")
		o.mu.Lock()
		defer o.mu.Unlock()
		require.Zero(t, o.twice, "no row ran on two workers at once")
	})
}

type srvJobArgs struct {
	N    int  `json:"n"`
	Fail bool `json:"fail"`
}

func (srvJobArgs) Kind() string { return "bq_srv_job" }

// The jobs table in lock and lease mode: transactional enqueue, unique
// keys, delays, retries with backoff, the failed jobs and their replay.
func TestServersJobs(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		require.NoError(t, bunqueue.Migrate(t.Context(), db), "Migrate is idempotent")
		effects := dbtest.Name("bq_srv_jobeff")
		srvTable(t, db, effects, "n BIGINT NOT NULL, queue VARCHAR(64) NOT NULL")
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				queue := jobQueue(t)
				t.Cleanup(func() { deleteJobQueueRows(db, queue) })
				c, err := bunqueue.NewClient(db, &bunqueue.Config{
					PollInterval: 50 * time.Millisecond, Logger: testLogger(t), Backoff: fastBackoff,
					JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Lease: 5 * time.Second}},
				})
				require.NoError(t, err)
				var mu sync.Mutex
				runs := map[int]int{}
				require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[srvJobArgs](func(ctx context.Context, tx bun.IDB, job *bunqueue.Job[srvJobArgs]) error {
					mu.Lock()
					runs[job.Args.N]++
					mu.Unlock()
					if job.Args.Fail {
						return errors.New("this job fails (test)")
					}
					_, err := tx.NewRaw("INSERT INTO ? (n, queue) VALUES (?, ?)", bun.Ident(effects), job.Args.N, queue).Exec(ctx)
					return err
				})))

				// Enqueued in a transaction with the app's writes: rolled
				// back, nothing; committed, all.
				const n = 200
				jobs := make([]bunqueue.EnqueueParams, n)
				for i := range jobs {
					jobs[i] = bunqueue.EnqueueParams{Args: srvJobArgs{N: i + 1}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
				}
				tx, err := db.BeginTx(t.Context(), nil)
				require.NoError(t, err)
				_, err = c.EnqueueMany(t.Context(), tx, jobs)
				require.NoError(t, err)
				require.NoError(t, tx.Rollback())
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
				require.NoError(t, db.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
					inserted, err := c.EnqueueMany(ctx, tx, jobs)
					require.Equal(t, n, inserted)
					return err
				}))
				unique := &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: dbtest.Name("k")}
				first, err := c.Enqueue(t.Context(), db, srvJobArgs{N: n + 1}, unique)
				require.NoError(t, err)
				again, err := c.Enqueue(t.Context(), db, srvJobArgs{N: n + 1}, unique)
				require.NoError(t, err)
				require.True(t, again.Duplicate)
				require.Equal(t, first.ID, again.ID)
				_, err = c.Enqueue(t.Context(), db, srvJobArgs{N: n + 2}, &bunqueue.EnqueueOpts{Queue: queue, Delay: 300 * time.Millisecond})
				require.NoError(t, err)
				_, err = c.Enqueue(t.Context(), db, srvJobArgs{N: n + 3}, &bunqueue.EnqueueOpts{Queue: queue, RunAt: time.Now().Add(200 * time.Millisecond)})
				require.NoError(t, err)
				failing := enqueueOne(t, c, db, srvJobArgs{N: n + 4, Fail: true}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})

				start(t, c)
				f := waitFailed(t, db, failing, 30*time.Second)
				require.Equal(t, 2, f.Attempts, "retried once, then failed")
				require.Contains(t, f.Error, "this job fails (test)")
				eventually(t, 30*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
				}, "every job ran")
				require.Equal(t, n+3, count(t, db, "SELECT COUNT(DISTINCT n) FROM ? WHERE queue = ?", bun.Ident(effects), queue))
				if mode == bunqueue.ModeLock {
					require.Equal(t, n+3, count(t, db, "SELECT COUNT(*) FROM ? WHERE queue = ?", bun.Ident(effects), queue), "each effect once")
				}

				// Replayed, it runs again (and fails again).
				newID, err := c.RetryFailed(t.Context(), f.ID)
				require.NoError(t, err)
				f2 := waitFailed(t, db, newID, 30*time.Second)
				require.Equal(t, 2, f2.Attempts)
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, 4, runs[n+4], "two attempts, twice")
			})
		}
	})
}

// A handler that hangs in SQL past the queue's Timeout: the server
// session is ended, the failure recorded apart, the other rows flow.
func TestServersTimeout(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		srvTable(t, db, "bq_srv_timeout", "id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0", "status, id")
		dbtest.Exec(t, db, "INSERT INTO bq_srv_timeout (id) VALUES (1), (2), (3), (4)")
		type item struct {
			bun.BaseModel `bun:"table:bq_srv_timeout"`
			ID            int64 `bun:",pk"`
			Status        string
		}
		var failures failures
		q := bunqueue.NewQueue("srv-timeout", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").Order("id")
		}, func(ctx context.Context, tx bun.Tx, it *item) error {
			if _, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx); err != nil {
				return err
			}
			if it.ID == 2 {
				_, err := tx.ExecContext(ctx, srv.Sleep(60))
				return err
			}
			return nil
		}, &bunqueue.QueueConfig[item]{
			Workers: 2, Timeout: 300 * time.Millisecond,
			OnError: func(ctx context.Context, tx bun.Tx, it *item, err error) error {
				failures.add(it.ID, err)
				_, uerr := tx.NewUpdate().Model(it).Set("status = 'failed'").WherePK().Exec(ctx)
				return uerr
			},
		})
		start(t, newClient(t, db, q))
		eventually(t, 20*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_srv_timeout WHERE status = 'waiting'") == 0
		}, "every row left the queue without waiting for the 60 s sleep")
		require.Equal(t, "failed", str(t, db, "SELECT status FROM bq_srv_timeout WHERE id = 2"))
		require.Equal(t, 3, count(t, db, "SELECT COUNT(*) FROM bq_srv_timeout WHERE status = 'done'"))
		causes := failures.of(2)
		require.Len(t, causes, 1)
		require.ErrorContains(t, causes[0], "timed out after 300ms")
	})
}

// timeType is a column type for a UTC time on srv.
func timeType(srv dbtest.Server) string {
	switch srv.Name {
	case "postgres":
		return "TIMESTAMPTZ"
	case "mysql":
		return "DATETIME(6)"
	}
	return "DATETIME"
}

// bunqueue.Now and NowPlus give the database clock on every server, with
// which a queue query compares the times the app stored.
func TestServersClock(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		table := dbtest.Name("bq_srv_clock")
		srvTable(t, db, table, "id BIGINT NOT NULL PRIMARY KEY, due "+timeType(srv)+" NULL")
		_, err := db.NewRaw("INSERT INTO ? (id, due) VALUES (1, ?), (2, ?), (3, NULL), (4, ?)", bun.Ident(table),
			bunqueue.NowPlus(db, -time.Second), bunqueue.NowPlus(db, time.Hour), bunqueue.Now(db)).Exec(t.Context())
		require.NoError(t, err)
		var due []int64
		require.NoError(t, db.NewRaw("SELECT id FROM ? WHERE due IS NULL OR due <= ? ORDER BY id", bun.Ident(table), bunqueue.Now(db)).Scan(t.Context(), &due))
		require.Equal(t, []int64{1, 3, 4}, due)
		var at time.Time
		require.NoError(t, db.NewRaw("SELECT due FROM ? WHERE id = 2", bun.Ident(table)).Scan(t.Context(), &at))
		require.WithinDuration(t, time.Now().Add(time.Hour), at, time.Minute, "an hour from now, in UTC, read back as an instant")
	})
}

// emptyDB opens a database (a schema on PostgreSQL) of srv that has no
// tables, dropped when the test ends.
func emptyDB(t *testing.T, srv dbtest.Server) *bun.DB {
	t.Helper()
	admin := srv.Open(t, 0)
	name := dbtest.Name("bq_empty")
	switch srv.Name {
	case "mysql":
		dbtest.Exec(t, admin, "CREATE DATABASE "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
		cfg, err := mysql.ParseDSN(dbtest.DSN())
		require.NoError(t, err)
		cfg.DBName = name
		sqldb, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		db := bun.NewDB(sqldb, mysqldialect.New())
		t.Cleanup(func() { _ = db.Close() })
		return db
	case "postgres":
		dbtest.Exec(t, admin, "CREATE SCHEMA "+name)
		t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE") })
		sqldb, err := sql.Open("pgx", dbtest.PGDSN()+"&search_path="+name)
		require.NoError(t, err)
		db := bun.NewDB(sqldb, pgdialect.New())
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	return admin // a file of the test's own
}

// Without the jobs tables, the jobs API says to migrate first.
func TestServersNotMigrated(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := emptyDB(t, srv)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
		require.NoError(t, err)
		_, err = c.Enqueue(t.Context(), db, srvJobArgs{N: 1}, nil)
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		_, err = c.EnqueueMany(t.Context(), db, []bunqueue.EnqueueParams{{Args: srvJobArgs{N: 1}}})
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		_, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{})
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		_, err = c.RetryFailed(t.Context(), 1)
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		require.ErrorIs(t, c.DeleteFailed(t.Context(), 1), bunqueue.ErrNotMigrated)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		_, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{})
		require.NoError(t, err)
	})
}

// Client.Stats and the dashboard's data read every server: a queue's
// depth, its rows processed, the failed jobs.
func TestServersStatsAndDashboard(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		srvTable(t, db, "bq_srv_stats", "id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting'", "status, id")
		dbtest.Exec(t, db, "INSERT INTO bq_srv_stats (id) VALUES (1), (2), (3)")
		type item struct {
			bun.BaseModel `bun:"table:bq_srv_stats"`
			ID            int64 `bun:",pk"`
			Status        string
		}
		q := bunqueue.NewQueue("srv-stats", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").Order("id")
		}, func(ctx context.Context, tx bun.Tx, it *item) error {
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, nil)
		c := newClient(t, db, q)
		depth := func() int {
			stats, err := c.Stats(t.Context())
			require.NoError(t, err)
			for _, s := range stats {
				if s.Name == "srv-stats" {
					return s.Depth
				}
			}
			t.Fatal("no stats for the queue")
			return 0
		}
		require.Equal(t, 3, depth())
		n, err := q.Count(t.Context(), 10)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		start(t, c)
		eventually(t, 10*time.Second, func() bool { return depth() == 0 }, "the queue drains")

		h := dashboard.New(c, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/data.json", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var data struct {
			Queues          []bunqueue.QueueStats `json:"queues"`
			QueuesError     string                `json:"queues_error"`
			FailedJobsError string                `json:"failed_jobs_error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &data))
		require.Empty(t, data.QueuesError)
		require.Empty(t, data.FailedJobsError)
		require.NotEmpty(t, data.Queues)
	})
}

// The wake-up hook sees the app's writes on every server: a row inserted
// by the app, and a job enqueued, start well before the poll would find
// them.
func TestServersWakeUp(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		srvTable(t, db, "bq_srv_wake", "id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting'", "status, id")
		type item struct {
			bun.BaseModel `bun:"table:bq_srv_wake"`
			ID            int64 `bun:",pk"`
			Status        string
		}
		started := make(chan time.Time, 10)
		q := bunqueue.NewQueue("srv-wake", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").Order("id")
		}, func(ctx context.Context, tx bun.Tx, it *item) error {
			started <- time.Now()
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, nil)
		queue := jobQueue(t)
		t.Cleanup(func() { deleteJobQueueRows(db, queue) })
		const poll = time.Minute // the poll alone would take this long
		c, err := bunqueue.NewClient(db, &bunqueue.Config{
			PollInterval: poll, Logger: testLogger(t),
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}},
		})
		require.NoError(t, err)
		require.NoError(t, c.Add(q))
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[srvJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[srvJobArgs]) error {
			started <- time.Now()
			return nil
		})))
		db.AddQueryHook(c.QueryHook())
		start(t, c)
		time.Sleep(200 * time.Millisecond) // the feeds' first reads found nothing

		within := func(what string) {
			t.Helper()
			select {
			case <-started:
			case <-time.After(poll / 2):
				t.Fatalf("%s did not wake its queue", what)
			}
		}
		_, err = db.NewInsert().Model(&item{ID: 1, Status: "waiting"}).Exec(t.Context())
		require.NoError(t, err)
		within("an INSERT into the queue's table")
		_, err = c.Enqueue(t.Context(), db, srvJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
		within("an Enqueue")
	})
}
