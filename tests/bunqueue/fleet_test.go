package bunqueue_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The fleet tests run several clients on separate pools, as several app
// servers would, against one queue while producers add work, in a
// database of their own whose statistics say, for the whole run, that
// the queue's table is empty: the planner's worst case, and a common one
// (a queue's table is often small when its statistics are taken). They
// count what a user would count: handler runs (a run repeated is an
// email sent twice, even when the database is right), deadlocks retried
// and batches that failed; and they check that every statement that
// locks rows reads them through an index, not by a scan.

const (
	fleetClients  = 3
	fleetBacklog  = 2000 // items waiting when the clients start
	fleetProduced = 1000 // items the producers add while they run
)

// fleetWorkers are the workers per client: the default, and many.
var fleetWorkers = []int{bunqueue.WorkersDefault, 16}

// A fleet counts the handler runs and conflicts of its clients.
type fleet struct {
	runs      sync.Map // item id → *atomic.Int64
	inFlight  sync.Map // item id → struct{}: a handler runs it now
	overlaps  atomic.Int64
	conflicts conflictCounter
	locking   lockingStatements
}

// ran counts a run of item id's handler, and whether another run of it
// is in flight in any client; call done when the run ends.
func (f *fleet) ran(id int64) (done func()) {
	n, _ := f.runs.LoadOrStore(id, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if _, busy := f.inFlight.LoadOrStore(id, struct{}{}); busy {
		f.overlaps.Add(1)
	}
	return func() { f.inFlight.Delete(id) }
}

// config returns client i's Config: the first client prepares no
// statements, so that its hook sees every statement's text.
func (f *fleet) config(t *testing.T, i int) *bunqueue.Config {
	return &bunqueue.Config{
		PollInterval: 100 * time.Millisecond, Logger: f.conflicts.logger(t),
		NoPreparedStatements: i == 0,
	}
}

// pool opens client i's pool on dsn, recording the statements that lock.
func (f *fleet) pool(t *testing.T, dsn string, workers int) *bun.DB {
	db := dbtest.OpenDSN(t, dsn, workers+4)
	db.AddQueryHook(&f.locking)
	return db
}

// report logs the fleet's counts and checks them against the goal: no
// handler runs one item twice at a time, at most one deadlock or failed
// batch per 10,000 items, handler re-runs on at most 0.1% of the items,
// and every locking statement read through an index.
func (f *fleet) report(t *testing.T, db *bun.DB, items int, took time.Duration) {
	t.Helper()
	var runs, rerun int64
	f.runs.Range(func(_, v any) bool {
		n := v.(*atomic.Int64).Load()
		runs += n
		if n > 1 {
			rerun++
		}
		return true
	})
	deadlocks, failed := f.conflicts.deadlocks.Load(), f.conflicts.failed.Load()
	t.Logf("%d items in %s (%.0f/s): %d handler runs, %d items re-run, %d deadlock retries, %d failed batches",
		items, took.Round(time.Millisecond), float64(items)/took.Seconds(), runs, rerun, deadlocks, failed)
	require.Zero(t, f.overlaps.Load(), "two handlers ran one item at the same time")
	require.GreaterOrEqual(t, runs, int64(items), "every item's handler ran")
	require.LessOrEqual(t, deadlocks+failed, int64(items/10000+1), "at most one deadlock per 10,000 items")
	require.LessOrEqual(t, rerun, int64(items/1000), "handler re-runs on at most 0.1%% of the items")
	f.locking.requireIndexed(t, db)
}

// fleetDatabase returns the DSN of a database of the test's own with the
// jobs tables and the given table, whose statistics (on MySQL and
// MariaDB) say that they are empty until the test ends.
func fleetDatabase(t *testing.T, table, columns string) string {
	dsn := dbtest.Scratch(t, "bq_fleet")
	db := dbtest.OpenDSN(t, dsn, 2)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	tables := []string{"bunqueue_jobs", "bunqueue_failed_jobs"}
	if table != "" {
		dbtest.Exec(t, db, "CREATE TABLE "+table+" ("+columns+")")
		tables = append(tables, table)
	}
	if !dbtest.IsPostgres() {
		for _, tbl := range tables {
			dbtest.Exec(t, db, "ALTER TABLE "+tbl+" STATS_PERSISTENT = 1 STATS_AUTO_RECALC = 0", "ANALYZE TABLE "+tbl)
		}
	}
	return dsn
}

// Jobs, lock and lease mode: three clients on separate pools, a backlog,
// and producers adding jobs one at a time and five at a time while the
// workers run. In lock mode the worker's effect is written in the job's
// transaction, UNIQUE on the job id; in lease mode through the pool.
func TestFleetJobs(t *testing.T) {
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		for _, workers := range fleetWorkers {
			t.Run(fmt.Sprintf("%s/workers=%d", mode, workers), func(t *testing.T) {
				testFleetJobs(t, mode, workers)
			})
		}
	}
}

type fleetArgs struct {
	N int `json:"n"`
}

func (fleetArgs) Kind() string { return "bq_test_fleet" }

func testFleetJobs(t *testing.T, mode bunqueue.JobMode, workers int) {
	const queue = "fleet"
	dsn := fleetDatabase(t, "bq_fleet_effect", "job_id BIGINT NOT NULL, UNIQUE KEY (job_id)")
	db := dbtest.OpenDSN(t, dsn, 4)
	f := &fleet{}
	var workErr atomic.Value
	var clients []*bunqueue.Client
	for i := range fleetClients {
		cfg := f.config(t, i)
		cfg.JobQueues = map[string]bunqueue.JobQueueConfig{queue: {Workers: workers, Mode: mode}}
		c, err := bunqueue.NewClient(f.pool(t, dsn, workers), cfg)
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[fleetArgs](
			func(ctx context.Context, db bun.IDB, job *bunqueue.Job[fleetArgs]) error {
				defer f.ran(job.ID)()
				_, err := db.NewRaw("INSERT INTO bq_fleet_effect (job_id) VALUES (?)", job.ID).Exec(ctx)
				if err != nil {
					workErr.CompareAndSwap(nil, err)
				}
				return err
			})))
		clients = append(clients, c)
	}
	enqueue := func(c *bunqueue.Client, n, per int) {
		for i := 0; i < n; i += per {
			jobs := make([]bunqueue.EnqueueParams, min(per, n-i))
			for j := range jobs {
				jobs[j] = bunqueue.EnqueueParams{Args: fleetArgs{N: i + j}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
			}
			_, err := c.EnqueueMany(t.Context(), db, jobs)
			require.NoError(t, err)
		}
	}
	enqueue(clients[0], fleetBacklog, 500)
	began := time.Now()
	for _, c := range clients {
		start(t, c)
	}
	produce(fleetProduced, func(p, n, per int) { enqueue(clients[p], n, per) })
	eventually(t, 2*time.Minute, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs") == 0
	}, "the queue drains")
	took := time.Since(began)
	require.Nil(t, workErr.Load(), "a worker failed (a second effect fails with a duplicate key)")
	require.Equal(t, fleetBacklog+fleetProduced, count(t, db, "SELECT COUNT(*) FROM bq_fleet_effect"), "one effect per job")
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs"))
	f.report(t, db, fleetBacklog+fleetProduced, took)
}

// produce runs two producers, each adding n/2 items in chunks of twenty
// calls of add, one item per call for the first and five for the second,
// with a pause between chunks, and waits for them.
func produce(n int, add func(producer, n, per int)) {
	var wg sync.WaitGroup
	for p, per := range []int{1, 5} {
		wg.Go(func() {
			for i := 0; i < n/2; i += per * 20 {
				add(p, per*20, per)
				time.Sleep(time.Duration(p+1) * 5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

type fleetItem struct {
	bun.BaseModel `bun:"table:bq_fleet_item"`
	ID            int64 `bun:",pk,autoincrement"`
	Status        string
}

// An any-table queue: three clients on separate pools over one table, a
// backlog, and producers inserting rows while the workers run. Each
// handler writes an effect, UNIQUE on the row's id, and takes its row out
// of the queue, in the row's transaction.
func TestFleetTable(t *testing.T) {
	for _, workers := range fleetWorkers {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			testFleetTable(t, workers)
		})
	}
}

func testFleetTable(t *testing.T, workers int) {
	dsn := fleetDatabase(t, "bq_fleet_item", "id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(16) NOT NULL, INDEX (status, id)")
	db := dbtest.OpenDSN(t, dsn, 4)
	dbtest.Exec(t, db, "CREATE TABLE bq_fleet_effect (item_id BIGINT NOT NULL, UNIQUE KEY (item_id))")
	f := &fleet{}
	var handlerErr atomic.Value
	var clients []*bunqueue.Client
	for i := range fleetClients {
		q := bunqueue.NewQueue("fleet",
			func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
			func(ctx context.Context, tx bun.Tx, it *fleetItem) error {
				defer f.ran(it.ID)()
				if _, err := tx.NewRaw("INSERT INTO bq_fleet_effect (item_id) VALUES (?)", it.ID).Exec(ctx); err != nil {
					handlerErr.CompareAndSwap(nil, err)
					return err
				}
				_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
				return err
			}, &bunqueue.QueueConfig[fleetItem]{Workers: workers})
		c, err := bunqueue.NewClient(f.pool(t, dsn, workers), f.config(t, i))
		require.NoError(t, err)
		require.NoError(t, c.Add(q))
		clients = append(clients, c)
	}
	insert := func(n, per int) {
		for i := 0; i < n; i += per {
			rows := make([]fleetItem, min(per, n-i))
			for j := range rows {
				rows[j].Status = "waiting"
			}
			_, err := db.NewInsert().Model(&rows).Exec(t.Context())
			require.NoError(t, err)
		}
	}
	insert(fleetBacklog, 500)
	began := time.Now()
	for _, c := range clients {
		start(t, c)
	}
	produce(fleetProduced, func(_, n, per int) { insert(n, per) })
	eventually(t, 2*time.Minute, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_fleet_item WHERE status = 'waiting'") == 0
	}, "the queue drains")
	took := time.Since(began)
	require.Nil(t, handlerErr.Load(), "a handler failed (a second effect fails with a duplicate key)")
	require.Equal(t, fleetBacklog+fleetProduced, count(t, db, "SELECT COUNT(*) FROM bq_fleet_effect"), "one effect per row")
	f.report(t, db, fleetBacklog+fleetProduced, took)
}

// conflictCounter is a slog handler's counts of the engine's deadlock
// retries and failed batches; it passes the records at Info and above
// on to the test's log.
type conflictCounter struct {
	deadlocks, failed atomic.Int64
}

func (cc *conflictCounter) logger(t *testing.T) *slog.Logger {
	return slog.New(&countingHandler{cc: cc, next: testLogger(t).Handler()})
}

type countingHandler struct {
	cc   *conflictCounter
	next slog.Handler
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "bunqueue: retrying transaction":
		h.cc.deadlocks.Add(1)
	case "bunqueue: batch failed":
		h.cc.failed.Add(1)
	}
	if r.Level < slog.LevelInfo {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{cc: h.cc, next: h.next.WithAttrs(as)}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{cc: h.cc, next: h.next.WithGroup(name)}
}

// lockingStatements is a bun query hook that keeps one example of each
// statement that locks rows of the engine's (an UPDATE, a DELETE, an
// INSERT … SELECT or a locking SELECT, with their values) by its shape:
// the longest seen.
type lockingStatements struct {
	mu     sync.Mutex
	byForm map[string]string
}

var (
	literals = regexp.MustCompile(`'[^']*'|\b\d+\b`)
	lists    = regexp.MustCompile(`\?(, \?)+`)
	locks    = regexp.MustCompile(`(?i)^\s*(UPDATE|DELETE|INSERT INTO \S+ \([^)]*\)\s*SELECT)|FOR (NO KEY )?UPDATE`)
	// queueTables are the tables of the fleets' queues.
	queueTables = regexp.MustCompile("\\b(bunqueue_jobs|bunqueue_failed_jobs|bq_fleet_item)\\b")
)

func (l *lockingStatements) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (l *lockingStatements) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if !locks.MatchString(e.Query) || !queueTables.MatchString(e.Query) {
		return // the handlers' effects and Start's probe are not the engine's hot path
	}
	form := lists.ReplaceAllString(literals.ReplaceAllString(e.Query, "?"), "?…")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byForm == nil {
		l.byForm = map[string]string{}
	}
	if len(e.Query) > len(l.byForm[form]) {
		l.byForm[form] = e.Query // the longest: a list of keys planned as a scan is a long one
	}
}

// requireIndexed explains, on MySQL and MariaDB, every locking statement
// seen, and requires that none reads a table by a scan of it or of a
// whole index: with the statistics the fleet's database keeps, a plan
// that can become a scan is one.
func (l *lockingStatements) requireIndexed(t *testing.T, db *bun.DB) {
	t.Helper()
	if dbtest.IsPostgres() {
		return // PostgreSQL's scans test a row's version before they lock or wait for it
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	require.NotEmpty(t, l.byForm, "the hook saw the engine's statements")
	for _, stmt := range l.byForm {
		for _, plan := range explain(t, db, stmt) {
			if plan["table"] == "" || strings.HasPrefix(plan["table"], "<") {
				continue // a derived table or no table
			}
			require.NotContains(t, []string{"ALL", "index"}, plan["type"], "a locking statement scans %s: %s\nplan: %v", plan["table"], stmt, plan)
		}
	}
}
