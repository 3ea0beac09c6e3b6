package bunqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of this file hold the jobs API to its input: what it stores
// is what it was given, compared exactly, or it says which field it
// cannot store, and stores nothing.

type exactArgs struct {
	N int `json:"n"`
}

func (exactArgs) Kind() string { return "t_exact" }

// jobsOn returns a migrated pool on srv and a client whose jobs queues are
// queues, whose rows are deleted when the test ends.
func jobsOn(t *testing.T, srv dbtest.Server, queues ...string) (*bun.DB, *bunqueue.Client) {
	t.Helper()
	db := srv.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	cfg := bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{}}
	for _, q := range queues {
		cfg.JobQueues[q] = bunqueue.JobQueueConfig{}
		t.Cleanup(func() { deleteJobQueueRows(db, q) })
	}
	return db, jobsTestClient(t, db, cfg)
}

// Unique keys are compared byte for byte: keys that differ by case, by a
// trailing space or by an accent are different keys, on every server, by
// Enqueue and by EnqueueMany; the same key is a duplicate.
func TestUniqueKeysCompareExactly(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		db, c := jobsOn(t, srv, queue)
		pairs := [][2]string{{"Key", "key"}, {"sp", "sp "}, {"é", "e"}, {"ß", "s"}, {"a", "A "}}
		for i, p := range pairs {
			a, b := fmt.Sprintf("%s-%d-%s", queue, i, p[0]), fmt.Sprintf("%s-%d-%s", queue, i, p[1])
			first := enqueueOne(t, c, db, exactArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: a})
			res, err := c.Enqueue(t.Context(), db, exactArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: b})
			require.NoError(t, err)
			require.False(t, res.Duplicate, "%q is not %q", b, a)
			require.NotEqual(t, first, res.ID)
			again, err := c.Enqueue(t.Context(), db, exactArgs{N: 3}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: a})
			require.NoError(t, err)
			require.Equal(t, bunqueue.EnqueueResult{ID: first, Duplicate: true}, again, "%q is itself", a)
			require.Equal(t, a, str(t, db, fmt.Sprintf("SELECT unique_key FROM bunqueue_jobs WHERE id = %d", first)))
			require.Equal(t, b, str(t, db, fmt.Sprintf("SELECT unique_key FROM bunqueue_jobs WHERE id = %d", res.ID)))

			n, err := c.EnqueueMany(t.Context(), db, []bunqueue.EnqueueParams{
				{Args: exactArgs{N: 4}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "many-" + a}},
				{Args: exactArgs{N: 5}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "many-" + b}},
				{Args: exactArgs{N: 6}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: a}},
			})
			require.NoError(t, err)
			require.Equal(t, 2, n, "two new keys, one pending")
		}
		require.Equal(t, 4*len(pairs), count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
	})
}

// Jobs queues whose names differ by case or by a trailing space are
// different queues: a worker of one runs none of the others' jobs. The
// failed jobs are filtered by queue and kind exactly too.
func TestJobQueuesCompareExactly(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		others := []string{strings.ToUpper(queue), queue + " "}
		db, producer := jobsOn(t, srv, append([]string{queue}, others...)...)
		var stranger []int64
		for _, q := range others {
			stranger = append(stranger, enqueueOne(t, producer, db, exactArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: q}))
		}
		marker := enqueueOne(t, producer, db, exactArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue})

		worker := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		var mu sync.Mutex
		var ran []int64
		require.NoError(t, bunqueue.AddWorker(worker, bunqueue.WorkerFunc[exactArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[exactArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, job.ID)
			return nil
		})))
		start(t, worker)
		eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, marker) }, "the job of %q runs", queue)
		require.NoError(t, worker.Stop(t.Context()))
		mu.Lock()
		require.Equal(t, []int64{marker}, ran, "the worker of %q ran only its job", queue)
		mu.Unlock()
		for i, id := range stranger {
			require.True(t, jobExists(t, db, id), "the job of %q waits", others[i])
		}

		for _, q := range []string{queue, others[0]} {
			insertID(t, db, `INSERT INTO bunqueue_failed_jobs (job_id, queue, kind, args, priority, attempts, max_attempts, error, created_at, failed_at)
VALUES (1, ?, 'T_Exact', '{}', 0, 1, 1, 'test', `+nowSQL(db)+`, `+nowSQL(db)+`)`, q)
		}
		for _, tc := range []struct {
			filter bunqueue.FailedJobsFilter
			want   int
		}{
			{bunqueue.FailedJobsFilter{Queue: queue}, 1},
			{bunqueue.FailedJobsFilter{Queue: others[0]}, 1},
			{bunqueue.FailedJobsFilter{Queue: others[1]}, 0},
			{bunqueue.FailedJobsFilter{Queue: queue, Kind: "T_Exact"}, 1},
			{bunqueue.FailedJobsFilter{Queue: queue, Kind: "t_exact"}, 0},
		} {
			got, err := producer.FailedJobs(t.Context(), tc.filter)
			require.NoError(t, err)
			require.Len(t, got, tc.want, "%+v", tc.filter)
			for _, f := range got {
				require.Equal(t, tc.filter.Queue, f.Queue)
			}
		}
	})
}

type badKindArgs struct{ kind string }

func (a badKindArgs) Kind() string { return a.kind }

type invalidKindArgs struct{}

func (invalidKindArgs) Kind() string { return "t_kind_\xff" }

type nulKindArgs struct{}

func (nulKindArgs) Kind() string { return "t_kind\x00" }

type longKindWorkerArgs struct{}

func (longKindWorkerArgs) Kind() string { return strings.Repeat("k", 256) }

// A string the jobs tables cannot hold as it is (bytes that are not UTF-8,
// which bun would store as U+FFFD; a NUL, which PostgreSQL's text cannot
// hold and bun's MySQL dialect drops) is refused with an error that names
// the field, on every server, by Enqueue and EnqueueMany, and nothing is
// stored. Any valid UTF-8 is stored as it is.
func TestEnqueueRefusesTextItCannotStore(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		// NewClient refuses such names in Config.JobQueues too; Enqueue
		// says what is wrong with the name before that it is unknown.
		badQueues := []string{queue + "\xff1", queue + "\x00"}
		db, c := jobsOn(t, srv, queue)
		for _, tc := range []struct {
			name string
			args bunqueue.JobArgs
			opts bunqueue.EnqueueOpts
			want []string
		}{
			{"queue not UTF-8", exactArgs{}, bunqueue.EnqueueOpts{Queue: badQueues[0]}, []string{"EnqueueOpts.Queue", "UTF-8"}},
			{"queue with NUL", exactArgs{}, bunqueue.EnqueueOpts{Queue: badQueues[1]}, []string{"EnqueueOpts.Queue", "NUL"}},
			{"kind not UTF-8", invalidKindArgs{}, bunqueue.EnqueueOpts{}, []string{"Kind()", "UTF-8"}},
			{"kind with NUL", nulKindArgs{}, bunqueue.EnqueueOpts{}, []string{"Kind()", "NUL"}},
			{"key not UTF-8", exactArgs{}, bunqueue.EnqueueOpts{UniqueKey: queue + "\xff1"}, []string{"EnqueueOpts.UniqueKey", "UTF-8"}},
			{"key with NUL", exactArgs{}, bunqueue.EnqueueOpts{UniqueKey: queue + "\x00k"}, []string{"EnqueueOpts.UniqueKey", "NUL"}},
			{"metadata key not UTF-8", exactArgs{}, bunqueue.EnqueueOpts{Metadata: map[string]string{"\xfe": "v"}}, []string{"EnqueueOpts.Metadata", "UTF-8"}},
			{"metadata value not UTF-8", exactArgs{}, bunqueue.EnqueueOpts{Metadata: map[string]string{"k": "v\xfe"}}, []string{`EnqueueOpts.Metadata["k"]`, "UTF-8"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.opts.Queue == "" {
					tc.opts.Queue = queue
				}
				requireRefused(t, c, db, queue, tc.args, tc.opts, tc.want...)
			})
		}
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue LIKE ?", queue+"%"), "nothing was stored")

		// What is valid UTF-8 is stored as it is, NUL in metadata included
		// (metadata is JSON, where NUL is \u0000).
		key := queue + "-🔑-é-\u00a0"
		meta := map[string]string{"é": "\x00🔑", "": ""}
		id := enqueueOne(t, c, db, exactArgs{}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key, Metadata: meta})
		require.Equal(t, key, str(t, db, fmt.Sprintf("SELECT unique_key FROM bunqueue_jobs WHERE id = %d", id)))
		var stored map[string]string
		require.NoError(t, json.Unmarshal([]byte(str(t, db, fmt.Sprintf("SELECT metadata FROM bunqueue_jobs WHERE id = %d", id))), &stored))
		require.Equal(t, meta, stored)
	})
}

// requireRefused checks that Enqueue refuses the job, and EnqueueMany
// the job after a valid one of queue, with an ErrInvalidJob whose message
// holds every want.
func requireRefused(t *testing.T, c *bunqueue.Client, db bun.IDB, queue string, args bunqueue.JobArgs, opts bunqueue.EnqueueOpts, want ...string) {
	t.Helper()
	res, err := c.Enqueue(t.Context(), db, args, &opts)
	requireInvalidJob(t, err, want...)
	require.Zero(t, res)
	n, err := c.EnqueueMany(t.Context(), db, []bunqueue.EnqueueParams{
		{Args: exactArgs{}, Opts: &bunqueue.EnqueueOpts{Queue: queue}},
		{Args: args, Opts: &opts},
	})
	requireInvalidJob(t, err, append(want, "job 1")...)
	require.Zero(t, n)
}

// requireInvalidJob checks that err is an ErrInvalidJob whose message
// holds every want.
func requireInvalidJob(t *testing.T, err error, want ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, bunqueue.ErrInvalidJob)
	for _, w := range want {
		require.ErrorContains(t, err, w)
	}
}

// AddWorker refuses a kind that no job could be enqueued with, naming it.
func TestAddWorkerRefusesKindsThatCannotBeStored(t *testing.T) {
	t.Parallel()
	c := jobsTestClient(t, dbtest.Open(t, 0), bunqueue.Config{})
	for _, tc := range []struct {
		name string
		add  func() error
		want []string
	}{
		{"not UTF-8", func() error { return bunqueue.AddWorker(c, bunqueue.WorkerFunc[invalidKindArgs](nil)) }, []string{"invalidKindArgs.Kind()", "UTF-8"}},
		{"NUL", func() error { return bunqueue.AddWorker(c, bunqueue.WorkerFunc[nulKindArgs](nil)) }, []string{"nulKindArgs.Kind()", "NUL"}},
		{"empty", func() error { return bunqueue.AddWorker(c, bunqueue.WorkerFunc[badKindArgs](nil)) }, []string{"badKindArgs.Kind()", "1 to 255 bytes, got 0"}},
		{"too long", func() error { return bunqueue.AddWorker(c, bunqueue.WorkerFunc[longKindWorkerArgs](nil)) }, []string{"longKindWorkerArgs.Kind()", "255 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalidJob(t, tc.add(), append(tc.want, "AddWorker")...)
		})
	}
}

// Every option out of the range the jobs tables hold on every server is
// refused with an error that names the field; the limits are stored as
// given. Nothing is clamped, zeroed or wrapped.
func TestEnqueueRefusesOptionsOutOfRange(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		db, c := jobsOn(t, srv, queue)
		minRunAt := time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
		maxRunAt := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
		for _, tc := range []struct {
			name string
			opts bunqueue.EnqueueOpts
			want []string
		}{
			{"RunAt in year 10000", bunqueue.EnqueueOpts{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{"EnqueueOpts.RunAt", "10000-01-01"}},
			{"RunAt past the last microsecond", bunqueue.EnqueueOpts{RunAt: maxRunAt.Add(time.Microsecond)}, []string{"EnqueueOpts.RunAt"}},
			{"RunAt in year 10000 in UTC", bunqueue.EnqueueOpts{RunAt: time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("UTC-5", -5*3600))}, []string{"EnqueueOpts.RunAt"}},
			{"RunAt before year 1000", bunqueue.EnqueueOpts{RunAt: minRunAt.Add(-time.Microsecond)}, []string{"EnqueueOpts.RunAt", "0999-12-31"}},
			{"RunAt in year 1", bunqueue.EnqueueOpts{RunAt: time.Time{}.Add(time.Nanosecond)}, []string{"EnqueueOpts.RunAt"}},
			{"RunAt before year 1", bunqueue.EnqueueOpts{RunAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{"EnqueueOpts.RunAt"}},
			{"MaxAttempts 1<<40", bunqueue.EnqueueOpts{MaxAttempts: 1 << 40}, []string{"EnqueueOpts.MaxAttempts", "2147483647", "1099511627776"}},
			{"MaxAttempts past int32", bunqueue.EnqueueOpts{MaxAttempts: math.MaxInt32 + 1}, []string{"EnqueueOpts.MaxAttempts", "2147483648"}},
			{"Priority 1<<40", bunqueue.EnqueueOpts{Priority: 1 << 40}, []string{"EnqueueOpts.Priority", "1099511627776"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.opts.Queue = queue
				requireRefused(t, c, db, queue, exactArgs{}, tc.opts, tc.want...)
			})
		}
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "nothing was stored")

		// The limits are stored as given.
		runAt := func(id int64) time.Time {
			t.Helper()
			var at time.Time
			require.NoError(t, db.NewRaw("SELECT run_at FROM bunqueue_jobs WHERE id = ?", id).Scan(t.Context(), &at))
			return at
		}
		for _, at := range []time.Time{minRunAt, maxRunAt, maxRunAt.In(time.FixedZone("UTC+14", 14*3600))} {
			id := enqueueOne(t, c, db, exactArgs{}, &bunqueue.EnqueueOpts{Queue: queue, RunAt: at})
			require.True(t, at.Equal(runAt(id)), "RunAt %s stored as %s", at, runAt(id))
		}
		id := enqueueOne(t, c, db, exactArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: math.MaxInt32})
		require.Equal(t, math.MaxInt32, count(t, db, "SELECT max_attempts FROM bunqueue_jobs WHERE id = ?", id))
		id = enqueueOne(t, c, db, exactArgs{}, &bunqueue.EnqueueOpts{Queue: queue, Delay: math.MaxInt64})
		require.True(t, runAt(id).After(time.Now().AddDate(290, 0, 0)), "the longest Delay is stored: run_at %s", runAt(id))
	})
}

// Enqueue and EnqueueMany send no statement that turns errors into
// warnings (MySQL's INSERT IGNORE), and a pending unique key inside the
// app's transaction leaves that transaction whole: the duplicate is
// reported, the app's other writes and jobs commit.
func TestEnqueueHidesNoErrors(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		db, c := jobsOn(t, srv, queue)
		hooked := srv.Open(t, 0)
		var log stmtLog
		hooked.AddQueryHook(&log)
		key := queue + "-pending"
		pending := enqueueOne(t, c, hooked, exactArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key})
		app := dbtest.Name("bq_test_app")
		srvTable(t, db, app, "n INT NOT NULL")

		var fresh int64
		require.NoError(t, hooked.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewRaw("INSERT INTO ? (n) VALUES (1)", bun.Ident(app)).Exec(ctx); err != nil {
				return err
			}
			res, err := c.Enqueue(ctx, tx, exactArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key})
			require.NoError(t, err)
			require.Equal(t, bunqueue.EnqueueResult{ID: pending, Duplicate: true}, res)
			n, err := c.EnqueueMany(ctx, tx, []bunqueue.EnqueueParams{
				{Args: exactArgs{N: 3}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key}},
				{Args: exactArgs{N: 4}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key + "-new"}},
				{Args: exactArgs{N: 5}, Opts: &bunqueue.EnqueueOpts{Queue: queue}},
			})
			require.NoError(t, err)
			require.Equal(t, 2, n)
			res, err = c.Enqueue(ctx, tx, exactArgs{N: 6}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			fresh = res.ID
			_, err = tx.NewRaw("INSERT INTO ? (n) VALUES (2)", bun.Ident(app)).Exec(ctx)
			return err
		}))
		require.Equal(t, 2, count(t, db, "SELECT COUNT(*) FROM "+app), "the app's writes committed")
		require.Equal(t, 4, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
		require.True(t, jobExists(t, db, fresh))
		var args exactArgs
		require.NoError(t, json.Unmarshal([]byte(str(t, db, fmt.Sprintf("SELECT args FROM bunqueue_jobs WHERE id = %d", pending))), &args))
		require.Equal(t, 1, args.N, "the pending job is left as it was")
		for _, s := range log.matching("") {
			require.NotContains(t, strings.ToUpper(s.head), "IGNORE", "a statement that hides errors")
		}
	})
}

// Producers that enqueue overlapping unique keys at once, with Enqueue and
// EnqueueMany, insert each key once; each call counts what it inserted.
func TestEnqueueManyUniqueKeysConcurrent(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		queue := jobQueue(t)
		db, c := jobsOn(t, srv, queue)
		const producers, keys = 6, 300
		inserted := make([]int, producers)
		errs := make([]error, producers)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				<-gate
				jobs := make([]bunqueue.EnqueueParams, 0, keys)
				for k := range keys {
					key := fmt.Sprintf("%s-%d", queue, (k*(p+1))%keys)
					jobs = append(jobs, bunqueue.EnqueueParams{Args: exactArgs{N: p}, Opts: &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key}})
				}
				if p%2 == 1 {
					for _, j := range jobs[:20] {
						res, err := c.Enqueue(context.Background(), db, j.Args, j.Opts)
						if err != nil {
							errs[p] = err
							return
						}
						if !res.Duplicate {
							inserted[p]++
						}
					}
					jobs = jobs[20:]
				}
				n, err := c.EnqueueMany(context.Background(), db, jobs)
				inserted[p] += n
				errs[p] = errors.Join(errs[p], err)
			})
		}
		close(gate)
		wg.Wait()
		total := 0
		for p := range producers {
			require.NoError(t, errs[p])
			total += inserted[p]
		}
		require.Equal(t, keys, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
		require.Equal(t, keys, count(t, db, "SELECT COUNT(DISTINCT unique_key) FROM bunqueue_jobs WHERE queue = ?", queue))
		require.Equal(t, keys, total, "the calls counted each key once")
	})
}

// Migrate upgrades jobs tables made by schema version 1 in place: their
// queue, kind and unique_key columns compare exactly (VARBINARY, with no
// padding: "key" and "key " differ), keep their indexes, and the rows
// keep their values byte for byte, also from a latin1 database.
func TestMigrateMakesTextColumnsExact(t *testing.T) {
	t.Parallel()
	dbtest.OnlyMySQL(t, "PostgreSQL and SQLite compare these columns exactly from version 1")
	fresh := openDSN(t, scratchDatabase(t, "bq_test_migexact"), 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), fresh))
	for _, charset := range []string{"utf8mb4", "latin1"} {
		t.Run(charset, func(t *testing.T) {
			t.Parallel()
			db := openDSN(t, charsetDatabase(t, "bq_test_migexact", charset), 0)
			v1, err := migrate.For(db, tables.Default)
			require.NoError(t, err)
			dbtest.Exec(t, db, v1.Versions)
			dbtest.Exec(t, db, migrate.MySQL(tables.Default).Migrations[0].Statements...)
			dbtest.Exec(t, db, "INSERT INTO bunqueue_migrations (version, name, applied_at) VALUES (1, 'jobs and failed jobs', UTC_TIMESTAMP(6))")
			jobs := []struct{ queue, kind, key string }{{"Mail", "K", "Key"}, {"é", "ü", "é"}, {"sp ", "k ", "sp "}}
			for _, j := range jobs {
				dbtest.Exec(t, db, fmt.Sprintf(`INSERT INTO bunqueue_jobs (queue, kind, args, max_attempts, run_at, created_at, unique_key)
VALUES ('%s', '%s', '{}', 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '%s')`, j.queue, j.kind, j.key))
				dbtest.Exec(t, db, fmt.Sprintf(`INSERT INTO bunqueue_failed_jobs (job_id, queue, kind, args, priority, attempts, max_attempts, unique_key, error, created_at, failed_at)
VALUES (1, '%s', '%s', '{}', 0, 1, 1, '%s', 'e', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, j.queue, j.kind, j.key))
			}

			applied, err := migrate.Run(t.Context(), db, tables.Default)
			require.NoError(t, err)
			var after1 []int // every version after the first
			for _, m := range migrate.MySQL(tables.Default).Migrations[1:] {
				after1 = append(after1, m.Version)
			}
			require.Equal(t, after1, applied)
			require.Equal(t, allVersions(t, db), appliedVersions(t, db))
			for _, table := range []string{tables.Default.Jobs, tables.Default.FailedJobs} {
				for _, j := range jobs {
					require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE queue = ? AND kind = ? AND unique_key = ?", j.queue, j.kind, j.key),
						"%s keeps %+v byte for byte", table, j)
				}
				var types []string
				require.NoError(t, db.NewRaw(`SELECT CONCAT(column_name, ' ', column_type) FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ? AND column_name IN ('queue', 'kind', 'unique_key') ORDER BY column_name`, table).Scan(t.Context(), &types))
				require.Equal(t, []string{"kind varbinary(255)", "queue varbinary(128)", "unique_key varbinary(255)"}, types)
			}
			want, got := schemaOf(t, fresh), schemaOf(t, db)
			for _, table := range []string{tables.Default.Jobs, tables.Default.FailedJobs} {
				require.Equal(t, withoutCharset(want[table]), withoutCharset(got[table]), "the upgraded %s is the new one", table)
			}

			c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"mail": {}}})
			for _, key := range []string{"key", "sp", "e"} {
				res, err := c.Enqueue(t.Context(), db, exactArgs{}, &bunqueue.EnqueueOpts{Queue: "mail", UniqueKey: key})
				require.NoError(t, err)
				require.False(t, res.Duplicate, "%q is a key of its own", key)
			}
			require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = 'Mail'"))
		})
	}
}

// charsetDatabase is scratchDatabase with a default character set.
func charsetDatabase(t *testing.T, prefix, charset string) string {
	t.Helper()
	admin := dbtest.Open(t, 0)
	name := dbtest.Name(prefix)
	dbtest.Exec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET "+charset)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg, err := mysql.ParseDSN(dbtest.DSN())
	require.NoError(t, err)
	cfg.DBName = name
	return cfg.FormatDSN()
}

// withoutCharset drops the table options of a SHOW CREATE TABLE, which
// name the database's default character set.
func withoutCharset(ddl string) string {
	head, _, _ := strings.Cut(ddl, ") ENGINE=")
	return head
}

type badErrorTextArgs struct{}

func (badErrorTextArgs) Kind() string { return "bad_error_text" }

// A worker's error with a NUL and invalid UTF-8 in it is recorded all the
// same (PostgreSQL's text holds neither): its attempt counts, and the job
// reaches the failed jobs instead of running again and again.
func TestJobErrorTheTablesCannotHoldIsRecorded(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			queue := jobQueue(t)
			c, err := bunqueue.NewClient(db, &bunqueue.Config{
				PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1, Mode: mode, Lease: 2 * time.Second}},
			})
			require.NoError(t, err)
			var runs atomic.Int32
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[badErrorTextArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[badErrorTextArgs]) error {
				runs.Add(1)
				return errors.New("bad \x00 byte \xff here")
			})))
			_, err = c.Enqueue(t.Context(), db, badErrorTextArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1})
			require.NoError(t, err)
			t.Cleanup(func() {
				_, _ = db.NewRaw("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue).Exec(context.Background())
			})
			start(t, c)
			var failed []bunqueue.FailedJob
			eventually(t, 15*time.Second, func() bool {
				failed, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{Queue: queue})
				require.NoError(t, err)
				return len(failed) == 1
			}, "the job failed for good")
			require.Contains(t, failed[0].Error, `bad \x00 byte `+"\uFFFD here")
			require.Equal(t, int32(1), runs.Load(), "runs of the job")
		})
	}
}

// A jobs queue's name and a failed-jobs filter are checked like the
// strings Enqueue stores: the error names the field.
func TestJobQueueNamesAndFiltersMustBeText(t *testing.T) {
	db := dbtest.Open(t, 0)
	for name, want := range map[string]string{"bad\xff": "must be valid UTF-8", "a\x00b": "must not contain a NUL byte"} {
		_, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{name: {}}})
		require.ErrorContains(t, err, "Config.JobQueues: a queue name "+want)
	}
	c, err := bunqueue.NewClient(db, nil)
	require.NoError(t, err)
	_, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{Queue: "a\x00b"})
	require.ErrorContains(t, err, "FailedJobsFilter.Queue must not contain a NUL byte")
	_, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{Kind: "\xfe"})
	require.ErrorContains(t, err, "FailedJobsFilter.Kind must be valid UTF-8")
}
