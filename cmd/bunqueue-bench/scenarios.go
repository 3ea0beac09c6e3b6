package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// workers is the concurrency of every scenario but the single-connection
// ceiling.
const workers = 16

// poolSize is the connection pool of a scenario's *bun.DB: comfortably
// above the workers (bunqueue needs workers + queues + 1).
const poolSize = workers + 16

// fallbackCeiling stands in for the 16-connection commit ceiling when the
// run did not measure it; it only sizes backlogs.
const fallbackCeiling = 10000

// Sizes of the large-backlog and post-burst scenarios.
const (
	largeFull  = 1_000_000
	burstFull  = 200_000
	burstQuick = 10_000
)

// scenario is one measurement of the bench.
type scenario struct {
	name        string
	desc        string
	concurrency int
	ceiling     bool     // it measures the commit ceiling at its concurrency
	noRatio     bool     // its rate is set by a producer: no ratio to the ceiling
	ratioTo     int      // the ceiling its ratio is to, if not its concurrency's
	needs       []string // scenarios it compares itself with: run them too
	// river, if set, is the River row it compares itself with (river.go):
	// run it too.
	river string
	// skip, if set, returns why the scenario cannot run against the
	// bench's server, or "" if it can: a skipped scenario has a row that
	// says why, and no figures.
	skip func(b *bench) string
	run  func(ctx context.Context, b *bench) (result, error)
}

// ratioConcurrency is the concurrency of the ceiling its ratio is to.
func (s scenario) ratioConcurrency() int {
	if s.ratioTo > 0 {
		return s.ratioTo
	}
	return s.concurrency
}

// deps returns the scenarios s needs: its own, and the ceiling its ratio
// is to.
func (s scenario) deps() []string {
	d := slices.Clone(s.needs)
	if s.river != "" {
		d = append(d, s.river)
	}
	if !s.ceiling && !s.noRatio {
		d = append(d, fmt.Sprintf("ceiling-%d", s.ratioConcurrency()))
	}
	return d
}

// batchFnScenario is the batch-handler scenario, set by batchfn.go when it
// is built.
var batchFnScenario *scenario

func scenarios() []scenario {
	b1 := &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1}
	b50 := &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 50}
	list := []scenario{
		{name: "ceiling-1", desc: "raw single-row UPDATE transactions, 1 connection", concurrency: 1, ceiling: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.commitCeiling(ctx, 1) }},
		{name: "ceiling-16", desc: "raw single-row UPDATE transactions, 16 connections", concurrency: workers, ceiling: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.commitCeiling(ctx, workers) }},
		{name: "write-only", desc: "the queue's write alone: BEGIN; UPDATE bench_items SET status = 'sent' WHERE id = next; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.writeOnly(ctx, 1) }},
		{name: "write-only-b50", desc: "the same, 50 rows per transaction: BEGIN; 50 × UPDATE … WHERE id = next; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.writeOnly(ctx, 50) }},
		{name: "write-only-jobs", desc: "a job's completion alone: BEGIN; DELETE FROM bunqueue_jobs WHERE id = next AND queue = this; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.writeOnlyJobs(ctx, 1) }},
		{name: "write-only-jobs-b50", desc: "the same, 50 jobs per transaction: BEGIN; 50 × DELETE … WHERE id = next; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.writeOnlyJobs(ctx, 50) }},
		{name: "design-bound", desc: "the design's statements alone, plain SQL, keys given: BEGIN; SELECT … WHERE id IN (next) FOR UPDATE SKIP LOCKED; UPDATE; re-check SELECT; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.designBound(ctx, 1) }},
		{name: "design-bound-b50", desc: "the same, 50 rows per transaction: BEGIN; SELECT 50 FOR UPDATE SKIP LOCKED; 50 × (SAVEPOINT; UPDATE); re-check SELECT; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.designBound(ctx, 50) }},
		{name: "design-bound-prepared", desc: "design-bound with its three statements prepared on the server, once per connection", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.designBoundPrepared(ctx) }},
		{name: "design-bound-jobs", desc: "a lock-mode job's statements alone: BEGIN; SELECT … WHERE id IN (next) FOR UPDATE SKIP LOCKED; SAVEPOINT; DELETE; COMMIT", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.designBoundJobs(ctx, 1) }},
		{name: "seed-baseline", desc: "seed article: INDEX(status, retry_at), ORDER BY id, pure SQL", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.seedBaseline(ctx) }},
		{name: "table-b1", desc: "any-table queue, BatchSize 1", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.tableQueue(ctx, b1, 3) }},
		// Right after table-b1, which it compares itself with.
		{name: "backlog-1m", desc: "table-b1 on a large backlog (--large rows)", concurrency: workers, needs: []string{"table-b1"},
			run: func(ctx context.Context, b *bench) (result, error) { return b.backlogLarge(ctx) }},
		// Right after table-b1, which it compares itself with.
		{name: "table-b1-prepared-handler", desc: "table-b1 with a handler that runs its UPDATE prepared (tx.Tx.StmtContext)", concurrency: workers, needs: []string{"table-b1"},
			run: func(ctx context.Context, b *bench) (result, error) { return b.preparedHandler(ctx) }},
		// Right after table-b1, which they compare themselves with.
		{name: "table-b1-global-16", desc: "table-b1 under a GlobalLimit of 16: one slot locked per transaction", concurrency: workers, needs: []string{"table-b1"},
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.limitedTable(ctx, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1, GlobalLimit: workers}, false, "table-b1")
			}},
		{name: "table-b1-keys-100", desc: "table-b1 under a KeyLimit of 1 over 100 keys (grp = id % 100)", concurrency: workers, needs: []string{"table-b1"},
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.limitedTable(ctx, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1, KeyColumn: "grp", KeyLimit: 1}, true, "table-b1")
			}},
		{name: "table-sized", desc: "any-table queue, 16 workers, self-sized batches", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.tableQueue(ctx, &bunqueue.QueueConfig[benchItem]{Workers: workers}, 8)
			}},
		// Right after table-sized, which they compare themselves with.
		{name: "table-sized-global-16", desc: "table-sized under a GlobalLimit of 16", concurrency: workers, needs: []string{"table-sized"},
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.limitedTable(ctx, &bunqueue.QueueConfig[benchItem]{Workers: workers, GlobalLimit: workers}, false, "table-sized")
			}},
		{name: "table-sized-keys-100", desc: "table-sized under a KeyLimit of 1 over 100 keys", concurrency: workers, needs: []string{"table-sized"},
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.limitedTable(ctx, &bunqueue.QueueConfig[benchItem]{Workers: workers, KeyColumn: "grp", KeyLimit: 1}, true, "table-sized")
			}},
		{name: "rate-limit", desc: "table-sized under a RateLimit of 100 per 100 ms: the rate achieved, as a share of the limit", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.rateLimited(ctx, bunqueue.Rate{N: 100, Per: 100 * time.Millisecond})
			}},
		{name: "idle", desc: "statements a second of a client whose queues have no work (the registry's heartbeat among them)", concurrency: 1, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.idle(ctx) }},
		{name: "table-b50", desc: "any-table queue, BatchSize 50", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.tableQueue(ctx, b50, 8) }},
		// Right after table-b50, which it compares itself with.
		{name: "tracing-on", desc: "table-b50 with the OpenTelemetry SDK, every span sampled", concurrency: workers, needs: []string{"table-b50"},
			run: func(ctx context.Context, b *bench) (result, error) { return b.tracingOn(ctx) }},
		// batchFnScenario goes here, after tracing-on.
		{name: "table-defaults", desc: "any-table queue, nil *QueueConfig (all defaults)", concurrency: workers, ratioTo: workers, needs: []string{"table-b1", "table-b50"},
			run: func(ctx context.Context, b *bench) (result, error) { return b.tableDefaults(ctx) }},
		// The latency runs before the jobs throughput scenarios: right
		// after those, on this server, it was sometimes far worse for a
		// few seconds (measured again by latency-post-jobs).
		{name: "latency", desc: "jobs, enqueue→start, 300 enqueues/s, wake-up hook", concurrency: workers, noRatio: true, river: riverLatencyName,
			run: func(ctx context.Context, b *bench) (result, error) { return b.latency(ctx, 300) }},
		{name: "latency-xproc", desc: "jobs, enqueue→start, 300 enqueues/s from another process", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.latencyCrossProcess(ctx, 300, false) }},
		{name: "latency-xproc-notify", desc: "latency-xproc with a pgxlisten.Listener: woken by LISTEN/NOTIFY", concurrency: workers, noRatio: true,
			skip: noNotifications,
			run:  func(ctx context.Context, b *bench) (result, error) { return b.latencyCrossProcess(ctx, 300, true) }},
		{name: "latency-xproc-notify-table", desc: "latency-xproc-notify for an any-table queue: rows inserted with Client.Notify", concurrency: workers, noRatio: true,
			skip: noNotifications,
			run:  func(ctx context.Context, b *bench) (result, error) { return b.latencyTableNotify(ctx, 300) }},
		// burnScenarios go here, before the jobs rows.
		{name: "jobs-lock-b1", desc: "jobs table, lock mode, BatchSize 1", concurrency: workers, river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLock, 1, 3) }},
		{name: "jobs-lock-b50", desc: "jobs table, lock mode, BatchSize 50", concurrency: workers, river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLock, 50, 8) }},
		{name: "jobs-lease-b1", desc: "jobs table, lease mode, BatchSize 1", concurrency: workers, river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLease, 1, 2) }},
		{name: "jobs-defaults", desc: "jobs table, zero JobQueueConfig (all defaults)", concurrency: workers, ratioTo: workers, needs: []string{"jobs-lock-b1", "jobs-lock-b50"},
			river: riverBurnTuned,
			run:   func(ctx context.Context, b *bench) (result, error) { return b.jobsDefaults(ctx) }},
		{name: "latency-post-jobs", desc: "the latency scenario again, right after the jobs bursts", concurrency: workers, noRatio: true, river: riverLatencyName,
			run: func(ctx context.Context, b *bench) (result, error) { return b.latency(ctx, 300) }},
		// After latency-post-jobs, which is to follow the jobs bursts.
		// fleetScenarios go here.
		{name: "post-burst-table", desc: "table-b1 right after a burst (--burst rows) was processed", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.postBurstTable(ctx) }},
		{name: "post-burst-jobs", desc: "jobs-lock-b1 right after a burst (--burst jobs) was processed and deleted", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.postBurstJobs(ctx, b.burst, burstFull, false)
			}},
		{name: "memory-1k", desc: "peak RSS of a child process draining 1,000 rows", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.memory(ctx, 1000) }},
		{name: "memory-1m", desc: "peak RSS of a child process on a large backlog (--large rows)", concurrency: workers, noRatio: true, needs: []string{"memory-1k"},
			run: func(ctx context.Context, b *bench) (result, error) { return b.memory(ctx, b.large) }},
		// Last: it leaves purge far behind, which would weigh on whatever
		// ran next.
		{name: "post-burst-held", desc: "post-burst-jobs with purge held back by an open read view during the burst", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.postBurstJobs(ctx, min(b.burst, heldBurstMax), heldBurstMax, true)
			}},
	}
	if batchFnScenario != nil {
		i := slices.IndexFunc(list, func(s scenario) bool { return s.name == "tracing-on" })
		list = slices.Insert(list, i+1, *batchFnScenario)
	}
	i := slices.IndexFunc(list, func(s scenario) bool { return s.name == "latency" })
	list = slices.Insert(list, i, riverLatencyScenario())
	i = slices.IndexFunc(list, func(s scenario) bool { return s.name == "jobs-lock-b1" })
	list = slices.Insert(list, i, burnScenarios()...)
	i = slices.IndexFunc(list, func(s scenario) bool { return s.name == "post-burst-table" })
	return slices.Insert(list, i, fleetScenarios()...)
}

// backlog returns how many items to pre-insert so that a scenario that
// runs at factor × the 16-connection ceiling does not run dry before its
// window ends, nor during the tail that reads its transactions.
func (b *bench) backlog(factor float64) int {
	c, ok := b.ceiling[workers]
	if !ok || c <= 0 {
		c = fallbackCeiling
	}
	n := int(c * factor * (b.warmup + b.duration + b.tail() + time.Second).Seconds())
	return min(max(n, 5000), 3_000_000)
}

// execAll runs statements in order.
func execAll(ctx context.Context, db bun.IDB, stmts ...string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// fillRows inserts n rows of tuple into table, 1000 per statement, on 4
// connections.
func fillRows(ctx context.Context, db *bun.DB, table, columns, tuple string, n int) error {
	g := newGroup(ctx, 4)
	for left := n; left > 0; left -= 1000 {
		k := min(left, 1000)
		stmt := "INSERT INTO " + table + " (" + columns + ") VALUES " + strings.TrimSuffix(strings.Repeat(tuple+",", k), ",")
		g.Go(func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, stmt)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("fill %s: %w", table, err)
	}
	return nil
}

// loops runs body on n connections of db, each in a loop, until stop is
// closed, and counts what the bodies report done. The first error that is
// not caused by stopping ends all loops and is returned by wait.
type loops struct {
	done    atomic.Int64
	stopped atomic.Bool
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
}

func startLoops(ctx context.Context, db *bun.DB, n int, body func(ctx context.Context, conn *sql.Conn, worker, iter int) (int, error)) *loops {
	l := &loops{}
	fail := func(err error) {
		l.errOnce.Do(func() { l.err = err })
		l.stopped.Store(true)
	}
	for w := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			conn, err := db.DB.Conn(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			for i := 0; !l.stopped.Load(); i++ {
				k, err := body(ctx, conn, w, i)
				if err != nil {
					fail(err)
					return
				}
				l.done.Add(int64(k))
			}
		}()
	}
	return l
}

// wait stops the loops, waits for them and returns the first error.
func (l *loops) wait() error {
	l.stopped.Store(true)
	l.wg.Wait()
	return l.err
}

// commitCeiling measures BEGIN; UPDATE one row by primary key; COMMIT on
// n connections, each on its own 64 rows.
func (b *bench) commitCeiling(ctx context.Context, n int) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const table, perConn = "bench_ceiling", 64
	defer dropTables(db, table)
	if err := execAll(ctx, db, append([]string{"DROP TABLE IF EXISTS " + table}, b.sql.counterTable(table)...)...); err != nil {
		return result{}, err
	}
	var ids []string
	for i := 1; i <= n*perConn; i++ {
		ids = append(ids, "("+strconv.Itoa(i)+")")
	}
	if err := execAll(ctx, db, "INSERT INTO "+table+" (id) VALUES "+strings.Join(ids, ",")); err != nil {
		return result{}, err
	}
	l := startLoops(ctx, db, n, func(ctx context.Context, conn *sql.Conn, w, i int) (int, error) {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		// The id is in the text: with the driver's defaults an argument
		// would cost a prepare and a close, as bun avoids too.
		id := w*perConn + i%perConn + 1
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = "+strconv.Itoa(id)); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		return 1, tx.Commit()
	})
	w, err := b.measure(ctx, &l.done)
	if werr := l.wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: fmt.Sprintf("%d rows per connection, default isolation", perConn)}, nil
}

// writeOnly is the any-table scenarios' work with nothing of a queue:
// each of 16 connections marks the next perTx waiting rows of bench_items
// sent, one UPDATE per row, in a transaction (BEGIN; the handler's
// UPDATEs; COMMIT), the connections taking interleaved ids at the head,
// as workers do. It is what a queue with per-row handlers could reach if
// claiming cost nothing, on the queue's own table and index, where the
// ceiling's counter has none.
func (b *bench) writeOnly(ctx context.Context, perTx int) (result, error) {
	bl, err := b.itemsBacklog(ctx, 3*float64(min(perTx, 2)))
	if err != nil {
		return result{}, err
	}
	defer bl.close()
	return b.measureWrites(ctx, bl.db, bl.first, bl.last, perTx, func(id int64) string {
		return "UPDATE " + itemsTable + " SET status = 'sent' WHERE id = " + strconv.FormatInt(id, 10)
	}, bl.note)
}

// writeOnlyJobs is the jobs scenarios' completion with nothing of a
// queue: each of 16 connections deletes the next perTx jobs of a backlog,
// one DELETE each, in a transaction, as a lock-mode worker's completions
// do, on the jobs table and its indexes.
func (b *bench) writeOnlyJobs(ctx context.Context, perTx int) (result, error) {
	const queue = "bench_write_only"
	bl, err := b.jobsBacklog(ctx, queue, 3*float64(min(perTx, 2)))
	if err != nil {
		return result{}, err
	}
	defer bl.close()
	// The queue's ids are not all of [first, last]: other processes (tests
	// running at the same time) enqueue into the same table. Their jobs
	// must not be deleted.
	return b.measureWrites(ctx, bl.db, bl.first, bl.last, perTx, func(id int64) string {
		return "DELETE FROM " + jobsTable + " WHERE id = " + strconv.FormatInt(id, 10) + " AND queue = '" + queue + "'"
	}, bl.note)
}

// plainBacklog is the backlog of a plain-SQL scenario: its pool, the ids
// of its rows or jobs, and the note that describes it.
type plainBacklog struct {
	db          *bun.DB
	first, last int64
	note        func(dry bool) string
	close       func() // drops the rows or jobs, closes the pool
}

// itemsBacklog fills bench_items with a backlog for a scenario that runs
// at factor × the ceiling.
func (b *bench) itemsBacklog(ctx context.Context, factor float64) (plainBacklog, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return plainBacklog{}, err
	}
	bl := plainBacklog{db: db, close: func() { dropTables(db, itemsTable); db.Close() }}
	n := b.backlog(factor)
	if _, err := b.createItems(ctx, db, n); err != nil {
		bl.close()
		return plainBacklog{}, err
	}
	if err := db.NewRaw("SELECT MIN(id) FROM "+itemsTable).Scan(ctx, &bl.first); err != nil {
		bl.close()
		return plainBacklog{}, err
	}
	bl.last = bl.first + int64(n) - 1
	bl.note = func(dry bool) string { return backlogNote(n, "rows pre-inserted", dry) }
	return bl, nil
}

// jobsBacklog enqueues a backlog of jobs in queue for a scenario that
// runs at factor × the ceiling.
func (b *bench) jobsBacklog(ctx context.Context, queue string, factor float64) (plainBacklog, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return plainBacklog{}, err
	}
	client, cleanup, err := b.jobsClient(ctx, db, queue, bunqueue.JobQueueConfig{})
	if err != nil {
		db.Close()
		return plainBacklog{}, err
	}
	bl := plainBacklog{db: db, close: func() { cleanup(); db.Close() }}
	n := b.backlog(factor)
	err = enqueueBacklog(ctx, client, db, queue, n)
	if err == nil {
		err = b.analyze(ctx, db, jobsTable)
	}
	if err != nil {
		bl.close()
		return plainBacklog{}, err
	}
	if err := db.NewRaw("SELECT MIN(id), MAX(id) FROM "+jobsTable+" WHERE queue = ?", queue).Scan(ctx, &bl.first, &bl.last); err != nil {
		bl.close()
		return plainBacklog{}, err
	}
	bl.note = func(dry bool) string { return backlogNote(n, "jobs enqueued", dry) }
	return bl, nil
}

// measureWrites runs, on 16 connections of db, one transaction after
// another of stmt for the next perTx ids of [first, last] each, and
// measures it; note describes the backlog, given whether it ran dry.
func (b *bench) measureWrites(ctx context.Context, db *bun.DB, first, last int64, perTx int, stmt func(id int64) string, note func(dry bool) string) (result, error) {
	return b.measureSQL(ctx, db, first, last, perTx, func(ids []int64) []step {
		steps := make([]step, len(ids))
		for i, id := range ids {
			steps[i] = step{sql: stmt(id), count: true}
		}
		return steps
	}, note)
}

// measureSQL runs sqlLoop over [first, last] on 16 connections of db and
// measures it; note describes the backlog, given whether it ran dry.
func (b *bench) measureSQL(ctx context.Context, db *bun.DB, first, last int64, perTx int, steps func(ids []int64) []step, note func(dry bool) string) (result, error) {
	var dry atomic.Bool
	l := startLoops(ctx, db, workers, sqlLoop(first, last, perTx, &dry, steps))
	w, err := b.measure(ctx, &l.done)
	if werr := l.wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: note(dry.Load()) + ", default isolation"}, nil
}

// step is one statement of a plain-SQL scenario's transaction.
type step struct {
	sql   string
	query bool // it returns rows: the client reads them
	count bool // the rows it changed, or read, are items done
	none  bool // a query that must find no row: the scenario fails if it does
	// stmt, if set, is run instead of sql, with args: a statement prepared
	// on the pool, which database/sql prepares once per connection.
	stmt *sql.Stmt
	args []any
}

// sqlLoop is the body of the plain-SQL scenarios: in each transaction,
// worker w runs steps(ids) for the next perTx ids of [first, last] (the
// workers take interleaved ids), and counts the rows the counting steps
// changed (an id EnqueueMany skipped changes none). Past last, it reports
// the backlog dry and idles.
func sqlLoop(first, last int64, perTx int, dry *atomic.Bool, steps func(ids []int64) []step) func(context.Context, *sql.Conn, int, int) (int, error) {
	return func(ctx context.Context, conn *sql.Conn, w, i int) (int, error) {
		from := first + int64((i*workers+w)*perTx)
		if from > last {
			dry.Store(true)
			return 0, sleep(ctx, time.Millisecond)
		}
		ids := make([]int64, 0, perTx)
		for id := from; id < from+int64(perTx) && id <= last; id++ {
			ids = append(ids, id)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		done := 0
		for _, s := range steps(ids) {
			k, err := runStep(ctx, tx, s)
			if err != nil {
				_ = tx.Rollback()
				return 0, err
			}
			if s.count {
				done += k
			}
		}
		return done, tx.Commit()
	}
}

// runStep runs s in tx and returns the rows it changed, or read.
func runStep(ctx context.Context, tx *sql.Tx, s step) (int, error) {
	exec := func() (sql.Result, error) { return tx.ExecContext(ctx, s.sql) }
	query := func() (*sql.Rows, error) { return tx.QueryContext(ctx, s.sql) }
	if s.stmt != nil {
		st := tx.StmtContext(ctx, s.stmt)
		exec = func() (sql.Result, error) { return st.ExecContext(ctx, s.args...) }
		query = func() (*sql.Rows, error) { return st.QueryContext(ctx, s.args...) }
	}
	if !s.query {
		res, err := exec()
		if err != nil {
			return 0, err
		}
		k, _ := res.RowsAffected()
		return int(k), nil
	}
	rows, err := query()
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(sql.RawBytes)
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			return 0, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if s.none && n > 0 {
		return 0, fmt.Errorf("%d row(s) still match after their write: %s", n, firstLine(s.sql))
	}
	return n, nil
}

// seedBaseline is the seed article's loop in plain SQL: one item per
// transaction, INDEX(status, retry_at) with ORDER BY id.
func (b *bench) seedBaseline(ctx context.Context) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const table = "bench_seed"
	defer dropTables(db, table)
	if err := execAll(ctx, db, append([]string{"DROP TABLE IF EXISTS " + table},
		b.sql.queueTable(table, table+"_status", "status, retry_at")...)...); err != nil {
		return result{}, err
	}
	n := b.backlog(1.5)
	if err := fillRows(ctx, db, table, "status", "('waiting')", n); err != nil {
		return result{}, err
	}
	if err := b.analyze(ctx, db, table); err != nil {
		return result{}, err
	}
	var dry atomic.Bool
	claim := "SELECT id FROM " + table +
		" WHERE status = 'waiting' AND (retry_at IS NULL OR retry_at <= " + b.dialect.Now() + ")" +
		" ORDER BY id LIMIT 1 FOR " + b.dialect.SkipLocked()
	l := startLoops(ctx, db, workers, func(ctx context.Context, conn *sql.Conn, _, _ int) (int, error) {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		var id int64
		err = tx.QueryRowContext(ctx, claim).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			dry.Store(true)
			return 0, tx.Rollback()
		}
		if err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET status = 'sent' WHERE id = "+strconv.FormatInt(id, 10)); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		return 1, tx.Commit()
	})
	w, err := b.measure(ctx, &l.done)
	if werr := l.wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: backlogNote(n, "rows pre-inserted", dry.Load()) + ", default isolation"}, nil
}

func backlogNote(n int, what string, dry bool) string {
	s := fmt.Sprintf("backlog %d %s", n, what)
	if dry {
		s += "; RAN DRY: the rate is a lower bound"
	}
	return s
}

// dropTables drops the scenario's tables, whatever happened to its context.
func dropTables(db *bun.DB, tables ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range tables {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t)
	}
}

// benchItem is a row of the any-table scenarios' table.
type benchItem struct {
	bun.BaseModel `bun:"table:bench_items"`
	ID            int64 `bun:",pk,autoincrement"`
	Status        string
	RetryAt       *time.Time
	Grp           *int64 // the key of the table-b1-keys-100 scenario; NULL elsewhere
}

// createItems creates bench_items, with an index that serves the queue's
// query (README "Index advice"), and fills it with n waiting rows. It
// returns how long the fill took.
func (b *bench) createItems(ctx context.Context, db *bun.DB, n int) (time.Duration, error) {
	if err := execAll(ctx, db, append([]string{"DROP TABLE IF EXISTS " + itemsTable},
		b.sql.queueTable(itemsTable, "bench_items_queue", "status, id, retry_at")...)...); err != nil {
		return 0, err
	}
	began := time.Now()
	if err := fillRows(ctx, db, itemsTable, "status", "('waiting')", n); err != nil {
		return 0, err
	}
	return time.Since(began), b.analyze(ctx, db, itemsTable)
}

// analyze refreshes the planner's statistics of table after a bulk fill,
// where the server needs it (PostgreSQL: what autovacuum would do).
func (b *bench) analyze(ctx context.Context, db bun.IDB, table string) error {
	return execAll(ctx, db, b.sql.analyze(table)...)
}

// itemsTable is the table of benchItem.
const itemsTable = "bench_items"

// itemsQuery is the any-table scenarios' queue: the waiting rows, oldest
// first.
func (b *bench) itemsQuery(q *bun.SelectQuery) *bun.SelectQuery {
	return q.Where("status = 'waiting'").
		Where("retry_at IS NULL OR retry_at <= " + b.dialect.Now()).
		Order("id")
}

// poolWatch samples how many connections of a pool are in use, until
// stopped, and keeps the most it saw: the concurrency a configuration
// reaches, whatever the handlers' speed.
type poolWatch struct {
	stop chan struct{}
	done chan struct{}
	max  int
}

func watchPool(db *bun.DB) *poolWatch {
	p := &poolWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			p.max = max(p.max, db.Stats().InUse)
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// end stops the sampling and returns the most connections in use.
func (p *poolWatch) end() int {
	close(p.stop)
	<-p.done
	return p.max
}

// itemsQueue returns the any-table scenarios' queue over bench_items: the
// handler counts its run in t and marks its row sent, one UPDATE by
// primary key. cfg may be nil.
func (b *bench) itemsQueue(t *tally, cfg *bunqueue.QueueConfig[benchItem]) *bunqueue.Queue[benchItem] {
	return bunqueue.NewQueue(itemsTable, b.itemsQuery,
		func(ctx context.Context, tx bun.Tx, item *benchItem) error {
			t.ran(item.ID)
			_, err := tx.NewUpdate().Model(item).Set("status = 'sent'").WherePK().Exec(ctx)
			return err
		}, cfg)
}

// tableRun is one run of an any-table queue over bench_items.
type tableRun struct {
	rows  int                              // the backlog pre-inserted
	cfg   *bunqueue.QueueConfig[benchItem] // nil: all defaults
	pool  int                              // the connection pool; 0: poolSize
	setup func(cfg *bunqueue.Config)       // changes the client's config, if set
	// prepare, if set, runs on the backlog before the client starts.
	prepare func(ctx context.Context, db *bun.DB) error
	// preparedUpdate: the handler runs its UPDATE as a statement prepared
	// on the pool, through the item's transaction, instead of through bun.
	preparedUpdate bool
}

// tableStats is what a tableRun saw.
type tableStats struct {
	window
	fill  time.Duration // how long the backlog took to insert
	total int64         // the items processed from Start to Stop
}

func (t tableStats) note(rows int) string {
	return backlogNote(rows, "rows pre-inserted", t.end >= int64(rows))
}

// runTable runs an any-table queue over bench_items on a pre-inserted
// backlog.
func (b *bench) runTable(ctx context.Context, run tableRun) (tableStats, error) {
	db, err := b.open(ctx, cmp.Or(run.pool, poolSize))
	if err != nil {
		return tableStats{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	fill, err := b.createItems(ctx, db, run.rows)
	if err != nil {
		return tableStats{}, err
	}
	if run.prepare != nil {
		if err := run.prepare(ctx, db); err != nil {
			return tableStats{}, err
		}
	}
	cfg := b.config(bunqueue.Config{})
	if run.setup != nil {
		run.setup(cfg)
	}
	done := b.newTally()
	client, err := bunqueue.NewClient(db, cfg)
	if err != nil {
		return tableStats{}, err
	}
	q := b.itemsQueue(done, run.cfg)
	if run.preparedUpdate {
		stmt, err := db.DB.PrepareContext(ctx, "UPDATE "+itemsTable+" SET status = 'sent' WHERE id = "+b.dialect.Placeholder(1))
		if err != nil {
			return tableStats{}, err
		}
		defer stmt.Close()
		q = bunqueue.NewQueue(itemsTable, b.itemsQuery, func(ctx context.Context, tx bun.Tx, item *benchItem) error {
			done.ran(item.ID)
			_, err := tx.Tx.StmtContext(ctx, stmt).ExecContext(ctx, item.ID)
			return err
		}, run.cfg)
	}
	if err := client.Add(q); err != nil {
		return tableStats{}, err
	}
	w, err := b.runClient(ctx, client, &done.done, db)
	if err != nil {
		return tableStats{}, err
	}
	return tableStats{window: w, fill: fill, total: done.done.Load()}, nil
}

// tableQueue runs an any-table queue with cfg on a backlog sized for
// factor × the ceiling.
func (b *bench) tableQueue(ctx context.Context, cfg *bunqueue.QueueConfig[benchItem], factor float64) (result, error) {
	n := b.backlog(factor)
	st, err := b.runTable(ctx, tableRun{rows: n, cfg: cfg})
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: st.note(n)}, nil
}

// limitedTable runs an any-table queue with cfg, a GlobalLimit or a
// KeyLimit, on the backlog of unlimited, the scenario it compares itself
// with; keyed gives each row the key id % 100. The limits' slots table
// comes with Migrate.
func (b *bench) limitedTable(ctx context.Context, cfg *bunqueue.QueueConfig[benchItem], keyed bool, unlimited string) (result, error) {
	n := b.backlog(3)
	if cfg.BatchSize == 0 {
		n = b.backlog(8)
	}
	run := tableRun{rows: n, cfg: cfg, prepare: func(ctx context.Context, db *bun.DB) error {
		if err := bunqueue.Migrate(ctx, db); err != nil {
			return err
		}
		if !keyed {
			return nil
		}
		if err := execAll(ctx, db, "UPDATE "+itemsTable+" SET grp = id % 100"); err != nil {
			return err
		}
		return execAll(ctx, db, b.sql.vacuum(itemsTable)...) // the UPDATE left a dead version of every row
	}}
	st, err := b.runTable(ctx, run)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: st.note(n) + b.versus(st.rate, "of", "goal ≥ 0.90", unlimited)}, nil
}

// rateLimited runs an any-table queue of 16 workers with self-sized
// batches under the RateLimit r, on a backlog that lasts longer than the
// run at that rate, and reports the rate achieved and its share of r's
// (the limit's accuracy).
func (b *bench) rateLimited(ctx context.Context, r bunqueue.Rate) (result, error) {
	limit := float64(r.N) / r.Per.Seconds()
	n := max(int(2*limit*(b.warmup+b.duration+time.Second).Seconds()), 5000)
	run := tableRun{rows: n, cfg: &bunqueue.QueueConfig[benchItem]{Workers: workers, RateLimit: r},
		prepare: func(ctx context.Context, db *bun.DB) error { return bunqueue.Migrate(ctx, db) }}
	st, err := b.runTable(ctx, run)
	if err != nil {
		return result{}, err
	}
	note := fmt.Sprintf("RateLimit %d per %s (%.0f/s): %.3f of the limit; %s", r.N, r.Per, limit, st.rate/limit, st.note(n))
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: note}, nil
}

// preparedHandler runs table-b1 with a handler that runs its UPDATE as a
// statement prepared on the pool, in the item's transaction: what an app
// can do for its own writes, which bun formats on the client.
func (b *bench) preparedHandler(ctx context.Context) (result, error) {
	n := b.backlog(3)
	st, err := b.runTable(ctx, tableRun{rows: n, cfg: &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1}, preparedUpdate: true})
	if err != nil {
		return result{}, err
	}
	note := "BatchSize 1, the handler's UPDATE prepared on the pool and run with tx.Tx.StmtContext; " + st.note(n)
	note += b.versus(st.rate, "of", "", "table-b1")
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: note}, nil
}

// runClient starts client, measures done, and stops the client. While the
// client runs, it samples how many connections of db (the client's) are in
// use.
func (b *bench) runClient(ctx context.Context, client *bunqueue.Client, done *atomic.Int64, db *bun.DB) (w window, err error) {
	return b.runClientWith(ctx, client, done, db, b.measure)
}

// runClientWith is runClient with another way to measure.
func (b *bench) runClientWith(ctx context.Context, client *bunqueue.Client, done *atomic.Int64, db *bun.DB,
	measure func(context.Context, *atomic.Int64) (window, error)) (w window, err error) {
	if err := client.Start(ctx); err != nil {
		return window{}, err
	}
	pw := watchPool(db)
	w, err = measure(ctx, done)
	w.conns = pw.end()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := client.Stop(stopCtx); err == nil && serr != nil {
		err = fmt.Errorf("stop the client: %w", serr)
	}
	return w, err
}

// benchJob is the job of the jobs scenarios.
type benchJob struct {
	N int `json:"n"`
}

// Kind implements bunqueue.JobArgs.
func (benchJob) Kind() string { return "bunqueue_bench" }

// jobsTable and failedTable are the jobs tables bunqueue.Migrate creates.
const (
	jobsTable   = "bunqueue_jobs"
	failedTable = "bunqueue_failed_jobs"
)

// jobsClient returns a client of db that runs the jobs queue named queue
// with cfg, and a cleanup that deletes the queue's jobs.
func (b *bench) jobsClient(ctx context.Context, db *bun.DB, queue string, cfg bunqueue.JobQueueConfig) (*bunqueue.Client, func(), error) {
	return b.jobsClientConfig(ctx, db, queue, cfg, bunqueue.Config{})
}

// jobsClientConfig is jobsClient with base as the client's Config (its
// JobQueues set to queue alone).
func (b *bench) jobsClientConfig(ctx context.Context, db *bun.DB, queue string, cfg bunqueue.JobQueueConfig, base bunqueue.Config) (*bunqueue.Client, func(), error) {
	if err := bunqueue.Migrate(ctx, db); err != nil {
		return nil, nil, fmt.Errorf("create the jobs tables: %w", err)
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// In chunks: one DELETE of a million jobs would hold a million
		// row locks, more than a default 128 MiB buffer pool can keep
		// (MariaDB aborts).
		for _, t := range []string{jobsTable, failedTable} {
			for {
				n, err := b.sql.deleteChunk(ctx, db, t, queue, 5000)
				if err != nil || n < 5000 {
					break
				}
			}
		}
	}
	cleanup() // a run that was killed may have left some
	base.JobQueues = map[string]bunqueue.JobQueueConfig{queue: cfg}
	client, err := bunqueue.NewClient(db, b.config(base))
	if err != nil {
		return nil, nil, err
	}
	return client, cleanup, nil
}

// jobsQueue runs a queue of the jobs table on a backlog enqueued with
// EnqueueMany.
func (b *bench) jobsQueue(ctx context.Context, mode bunqueue.JobMode, batch int, factor float64) (result, error) {
	queue := fmt.Sprintf("bench_%s_b%d", mode, batch)
	n := b.backlog(factor)
	st, err := b.runJobs(ctx, queue, bunqueue.JobQueueConfig{Workers: workers, BatchSize: batch, Mode: mode}, n, poolSize)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: backlogNote(n, "jobs enqueued", st.end >= int64(n))}, nil
}

// runJobs runs the jobs queue named queue with cfg, on n jobs enqueued
// before it starts, with a pool of pool connections.
func (b *bench) runJobs(ctx context.Context, queue string, cfg bunqueue.JobQueueConfig, n, pool int) (tableStats, error) {
	db, err := b.open(ctx, pool)
	if err != nil {
		return tableStats{}, err
	}
	defer db.Close()
	client, cleanup, err := b.jobsClient(ctx, db, queue, cfg)
	if err != nil {
		return tableStats{}, err
	}
	defer cleanup()
	done := b.newTally()
	if err := bunqueue.AddWorker(client, countingWorker(done)); err != nil {
		return tableStats{}, err
	}
	began := time.Now()
	if err := enqueueBacklog(ctx, client, db, queue, n); err != nil {
		return tableStats{}, err
	}
	fill := time.Since(began)
	if err := b.analyze(ctx, db, jobsTable); err != nil {
		return tableStats{}, err
	}
	w, err := b.runClient(ctx, client, &done.done, db)
	if err != nil {
		return tableStats{}, err
	}
	return tableStats{window: w, fill: fill, total: done.done.Load()}, nil
}

// countingWorker is the jobs scenarios' worker: it counts the job's run
// in t and returns.
func countingWorker(t *tally) bunqueue.WorkerFunc[benchJob] {
	return func(_ context.Context, _ bun.IDB, job *bunqueue.Job[benchJob]) error {
		t.ran(job.ID)
		return nil
	}
}

// enqueueBacklog enqueues n benchJobs into queue with EnqueueMany, 5000
// per call, on 4 connections.
func enqueueBacklog(ctx context.Context, client *bunqueue.Client, db *bun.DB, queue string, n int) error {
	g := newGroup(ctx, 4)
	opts := &bunqueue.EnqueueOpts{Queue: queue}
	for from := 0; from < n; from += 5000 {
		params := make([]bunqueue.EnqueueParams, 0, 5000)
		for i := from; i < min(from+5000, n); i++ {
			params = append(params, bunqueue.EnqueueParams{Args: benchJob{N: i}, Opts: opts})
		}
		g.Go(func(ctx context.Context) error {
			_, err := client.EnqueueMany(ctx, db, params)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("enqueue the backlog: %w", err)
	}
	return nil
}

// latencyJob carries the time it was enqueued, and whether it was
// enqueued during the measured window.
type latencyJob struct {
	EnqueuedAt time.Time `json:"enqueued_at"`
	Measured   bool      `json:"measured"`
}

// Kind implements bunqueue.JobArgs.
func (latencyJob) Kind() string { return "bunqueue_bench_latency" }

// startRecorder is the latency scenarios' worker: it records, for each
// job, how long after its enqueue it first started.
type startRecorder struct {
	mu        sync.Mutex
	latencies []time.Duration // of the measured jobs
	started   atomic.Int64
	runs      *tally

	// sinceWake, if set, tells how long ago the last wake-up came: for
	// each measured job it is recorded beside the latency.
	sinceWake func(now time.Time) (time.Duration, bool)
	woken     []time.Duration

	times map[int64]jobTimes // of the measured jobs, by id
}

// jobTimes is when a job was enqueued (the call of Enqueue) and started.
type jobTimes struct{ enqueued, started time.Time }

func (r *startRecorder) worker() bunqueue.WorkerFunc[latencyJob] {
	return func(_ context.Context, _ bun.IDB, job *bunqueue.Job[latencyJob]) error {
		r.record(job.ID, job.Args, time.Now())
		return nil
	}
}

// record records that the job id, which carries job, started at now (its
// first start: a re-run is left out).
func (r *startRecorder) record(id int64, job latencyJob, now time.Time) {
	d := now.UTC().Sub(job.EnqueuedAt)
	if !r.runs.ran(id) {
		return // a re-run: it started before
	}
	r.started.Add(1)
	if !job.Measured {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, d)
	if r.times == nil {
		r.times = map[int64]jobTimes{}
	}
	r.times[id] = jobTimes{enqueued: job.EnqueuedAt, started: now}
	if r.sinceWake != nil {
		if w, ok := r.sinceWake(now); ok {
			r.woken = append(r.woken, w)
		}
	}
}

// waitStarted waits until n jobs started, or for at most d.
func (r *startRecorder) waitStarted(n int64, d time.Duration) {
	for deadline := time.Now().Add(d); r.started.Load() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// measured returns the latencies of the measured jobs.
func (r *startRecorder) measured() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.latencies)
}

// jobTimes returns when each measured job was enqueued and started, by
// id.
func (r *startRecorder) jobTimes() map[int64]jobTimes {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.times)
}

// sinceReturn returns, for the measured jobs that returned names (job
// id → Unix nanoseconds), how long after that each started.
func (r *startRecorder) sinceReturn(returned map[int64]int64) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ds []time.Duration
	for id, at := range returned {
		if t, ok := r.times[id]; ok {
			ds = append(ds, t.started.Sub(time.Unix(0, at)))
		}
	}
	return ds
}

// measuredSinceWake returns, for the measured jobs, how long after the
// last wake-up each started (none without sinceWake).
func (r *startRecorder) measuredSinceWake() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.woken)
}

// production is what a producer did.
type production struct {
	enqueued, inWindow int64
	window             time.Duration   // from the first to the last measured enqueue
	enqueueTimes       []time.Duration // how long the measured Enqueue calls took
}

// report is the part of a child's report that p makes.
func (p production) report() childReport {
	return childReport{
		Enqueued:     p.enqueued,
		InWindow:     p.inWindow,
		WindowS:      p.window.Seconds(),
		EnqueueP50ms: percentile(p.enqueueTimes, 0.5),
		EnqueueP99ms: percentile(p.enqueueTimes, 0.99),
	}
}

// produce calls enqueue perSecond times a second, each call at its
// tick, over the warm-up and the measured window, and says what it did.
// With concurrent, each call runs in a goroutine of its own (at most
// producers at once), so that the rate holds when a call takes longer
// than a tick (a far database); without, one after the other, in order
// (the cross-process rows match notifications to statements by order).
func (b *bench) produce(ctx context.Context, perSecond int, concurrent bool, enqueue func(ctx context.Context, job latencyJob) error) (production, error) {
	var p production
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	slots := make(chan struct{}, producers)
	interval := time.Second / time.Duration(perSecond)
	began := time.Now()
	windowStart := began.Add(b.warmup)
	end := windowStart.Add(b.duration)
	var first, last time.Time // of the measured enqueues
	call := func(now time.Time, measured bool) {
		err := enqueue(ctx, latencyJob{EnqueuedAt: now.UTC(), Measured: measured})
		took := time.Since(now)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("enqueue: %w", err))
			return
		}
		p.enqueued++
		if measured {
			p.inWindow++
			p.enqueueTimes = append(p.enqueueTimes, took)
		}
	}
	for i := 0; ; i++ {
		next := began.Add(time.Duration(i) * interval)
		if !next.Before(end) {
			break
		}
		if err := sleep(ctx, time.Until(next)); err != nil {
			return p, err
		}
		now := time.Now()
		measured := !now.Before(windowStart)
		if measured {
			if first.IsZero() {
				first = now
			}
			last = now
		}
		if !concurrent {
			call(now, measured)
		} else {
			slots <- struct{}{}
			wg.Go(func() { defer func() { <-slots }(); call(now, measured) })
		}
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
	}
	wg.Wait()
	p.window = last.Sub(first)
	return p, errors.Join(errs...)
}

// producers bounds the calls a concurrent producer has running at once.
const producers = 8

// latencyResult is the row of a latency scenario: lat are the latencies of
// the jobs started of the inWindow enqueued during window.
func latencyResult(lat []time.Duration, inWindow int64, window time.Duration, rss int64, note string) (result, error) {
	if inWindow < 2 || len(lat) == 0 || window <= 0 {
		return result{}, errors.New("no job was enqueued and started during the measured window")
	}
	if missing := inWindow - int64(len(lat)); missing > 0 {
		note += fmt.Sprintf("; %d NOT started by the end (not in the percentiles)", missing)
	}
	return result{
		ItemsPerSec: float64(len(lat)) / window.Seconds(),
		P50ms:       percentile(lat, 0.50), P95ms: percentile(lat, 0.95), P99ms: percentile(lat, 0.99),
		RSSKiB: rss,
		Note:   note,
	}, nil
}

// latency enqueues jobs at perSecond from one producer, one INSERT each
// (autocommit), through a DB that has the client's wake-up hook, and
// records when each job started against the time it carries.
func (b *bench) latency(ctx context.Context, perSecond int) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const queue = "bench_latency"
	client, cleanup, err := b.jobsClient(ctx, db, queue, bunqueue.JobQueueConfig{Workers: workers})
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	// River's row reads a table of its own, made anew: this one, without
	// autovacuum, holds the dead rows of the scenarios before it.
	vacuum := b.sql.vacuum(jobsTable)
	if err := execAll(ctx, db, vacuum...); err != nil {
		return result{}, err
	}
	db.AddQueryHook(client.QueryHook())

	rec := startRecorder{runs: b.newTally()}
	if err := bunqueue.AddWorker(client, rec.worker()); err != nil {
		return result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	stopClient := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return client.Stop(stopCtx)
	}

	opts := &bunqueue.EnqueueOpts{Queue: queue}
	p, prodErr := b.produce(ctx, perSecond, true, func(ctx context.Context, job latencyJob) error {
		_, err := client.Enqueue(ctx, db, job, opts)
		return err
	})
	// Give the last jobs up to 2 s to start.
	rec.waitStarted(p.enqueued, 2*time.Second)
	rss := readRSS()
	if err := stopClient(); prodErr == nil && err != nil {
		prodErr = fmt.Errorf("stop the client: %w", err)
	}
	if prodErr != nil {
		return result{}, prodErr
	}
	lat := rec.measured()
	if p.inWindow < 2 {
		return result{}, errors.New("fewer than 2 jobs were enqueued during the measured window")
	}
	note := fmt.Sprintf("%d enqueued in the window (%.0f/s, one autocommit INSERT each, the Enqueue call took p50 %.2f ms, p99 %.2f ms), %d started",
		p.inWindow, float64(p.inWindow)/p.window.Seconds(), *percentile(p.enqueueTimes, 0.5), *percentile(p.enqueueTimes, 0.99), len(lat))
	if len(vacuum) > 0 {
		note += "; " + vacuum[0] + " before it"
	}
	return latencyResult(lat, p.inWindow, p.window, rss, note)
}

// percentile returns the p-th quantile of ds in milliseconds (nearest
// rank). It sorts ds.
func percentile(ds []time.Duration, p float64) *float64 {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	i := min(len(ds)-1, int(p*float64(len(ds))))
	ms := float64(ds[i]) / float64(time.Millisecond)
	return &ms
}
