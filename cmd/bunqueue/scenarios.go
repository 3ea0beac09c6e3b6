package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// above the workers (bunqueue needs workers + 2).
const poolSize = workers + 16

// fallbackCeiling stands in for the 16-connection commit ceiling when the
// run did not measure it; it only sizes backlogs.
const fallbackCeiling = 10000

// scenario is one measurement of the bench.
type scenario struct {
	name        string
	desc        string
	concurrency int
	ceiling     bool // it measures the commit ceiling at its concurrency
	noRatio     bool // its rate is set by a producer: no ratio to the ceiling
	run         func(ctx context.Context, b *bench) (result, error)
}

func scenarios() []scenario {
	return []scenario{
		{name: "ceiling-1", desc: "raw single-row UPDATE transactions, 1 connection", concurrency: 1, ceiling: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.commitCeiling(ctx, 1) }},
		{name: "ceiling-16", desc: "raw single-row UPDATE transactions, 16 connections", concurrency: workers, ceiling: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.commitCeiling(ctx, workers) }},
		{name: "seed-baseline", desc: "seed article: INDEX(status, retry_at), ORDER BY id, pure SQL", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.seedBaseline(ctx) }},
		{name: "table-b1", desc: "any-table queue, BatchSize 1", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.tableQueue(ctx, 1, 1.5) }},
		{name: "table-b50", desc: "any-table queue, BatchSize 50", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.tableQueue(ctx, 50, 4) }},
		// The latency runs before the jobs throughput scenarios: right
		// after those, on this server, it was sometimes far worse for a
		// few seconds (measured again by latency-post-jobs).
		{name: "latency", desc: "jobs, enqueue→start, 300 enqueues/s, wake-up hook", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.latency(ctx, 300) }},
		{name: "jobs-lock-b1", desc: "jobs table, lock mode, BatchSize 1", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLock, 1, 1) }},
		{name: "jobs-lock-b50", desc: "jobs table, lock mode, BatchSize 50", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLock, 50, 3) }},
		{name: "jobs-lease-b1", desc: "jobs table, lease mode, BatchSize 1", concurrency: workers,
			run: func(ctx context.Context, b *bench) (result, error) { return b.jobsQueue(ctx, bunqueue.ModeLease, 1, 1) }},
		{name: "latency-post-jobs", desc: "the latency scenario again, right after the jobs bursts", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.latency(ctx, 300) }},
	}
}

// backlog returns how many items to pre-insert so that a scenario that
// runs at factor × the 16-connection ceiling does not run dry before its
// window ends.
func (b *bench) backlog(factor float64) int {
	c, ok := b.ceiling[workers]
	if !ok || c <= 0 {
		c = fallbackCeiling
	}
	n := int(c * factor * (b.warmup + b.duration + time.Second).Seconds())
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
	if err := execAll(ctx, db, "DROP TABLE IF EXISTS "+table,
		"CREATE TABLE "+table+" (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB"); err != nil {
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
	if err := execAll(ctx, db, "DROP TABLE IF EXISTS "+table,
		`CREATE TABLE `+table+` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	status VARCHAR(16) NOT NULL,
	retry_at DATETIME(6) NULL,
	INDEX (status, retry_at)
) ENGINE=InnoDB`); err != nil {
		return result{}, err
	}
	n := b.backlog(1.5)
	if err := fillRows(ctx, db, table, "status", "('waiting')", n); err != nil {
		return result{}, err
	}
	var dry atomic.Bool
	l := startLoops(ctx, db, workers, func(ctx context.Context, conn *sql.Conn, _, _ int) (int, error) {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		var id int64
		err = tx.QueryRowContext(ctx, "SELECT id FROM "+table+
			" WHERE status = 'waiting' AND (retry_at IS NULL OR retry_at <= UTC_TIMESTAMP(6))"+
			" ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED").Scan(&id)
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
}

// tableQueue runs an any-table queue over bench_items, with an index that
// serves its query (README "Index advice"), on a pre-inserted backlog.
func (b *bench) tableQueue(ctx context.Context, batch int, factor float64) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const table = "bench_items"
	defer dropTables(db, table)
	if err := execAll(ctx, db, "DROP TABLE IF EXISTS "+table,
		`CREATE TABLE `+table+` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	status VARCHAR(16) NOT NULL,
	retry_at DATETIME(6) NULL,
	INDEX bench_items_queue (status, id, retry_at)
) ENGINE=InnoDB`); err != nil {
		return result{}, err
	}
	n := b.backlog(factor)
	if err := fillRows(ctx, db, table, "status", "('waiting')", n); err != nil {
		return result{}, err
	}

	var done atomic.Int64
	q := bunqueue.NewQueue("bench_items",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").
				Where("retry_at IS NULL OR retry_at <= UTC_TIMESTAMP(6)").
				Order("id")
		},
		func(ctx context.Context, tx bun.Tx, item *benchItem) error {
			_, err := tx.NewUpdate().Model(item).Set("status = 'sent'").WherePK().Exec(ctx)
			if err == nil {
				done.Add(1)
			}
			return err
		},
		&bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: batch})
	client, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: b.log})
	if err != nil {
		return result{}, err
	}
	if err := client.Add(q); err != nil {
		return result{}, err
	}
	w, err := b.runClient(ctx, client, &done)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: backlogNote(n, "rows pre-inserted", w.end >= int64(n))}, nil
}

// runClient starts client, measures done, and stops the client.
func (b *bench) runClient(ctx context.Context, client *bunqueue.Client, done *atomic.Int64) (w window, err error) {
	if err := client.Start(ctx); err != nil {
		return window{}, err
	}
	w, err = b.measure(ctx, done)
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

// jobsClient returns a client of db that runs the jobs queue named queue
// with cfg, and a cleanup that deletes the queue's jobs.
func (b *bench) jobsClient(ctx context.Context, db *bun.DB, queue string, cfg bunqueue.JobQueueConfig) (*bunqueue.Client, func(), error) {
	if err := bunqueue.Migrate(ctx, db); err != nil {
		return nil, nil, fmt.Errorf("create the jobs tables: %w", err)
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = db.NewRaw("DELETE FROM bunqueue_jobs WHERE queue = ?", queue).Exec(ctx)
		_, _ = db.NewRaw("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue).Exec(ctx)
	}
	cleanup() // a run that was killed may have left some
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger:    b.log,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: cfg},
	})
	if err != nil {
		return nil, nil, err
	}
	return client, cleanup, nil
}

// jobsQueue runs a queue of the jobs table on a backlog enqueued with
// EnqueueMany.
func (b *bench) jobsQueue(ctx context.Context, mode bunqueue.JobMode, batch int, factor float64) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	queue := fmt.Sprintf("bench_%s_b%d", mode, batch)
	client, cleanup, err := b.jobsClient(ctx, db, queue, bunqueue.JobQueueConfig{Workers: workers, BatchSize: batch, Mode: mode})
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	var done atomic.Int64
	if err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[benchJob](func(context.Context, bun.IDB, *bunqueue.Job[benchJob]) error {
		done.Add(1)
		return nil
	})); err != nil {
		return result{}, err
	}

	n := b.backlog(factor)
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
		return result{}, fmt.Errorf("enqueue the backlog: %w", err)
	}

	w, err := b.runClient(ctx, client, &done)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: backlogNote(n, "jobs enqueued", w.end >= int64(n))}, nil
}

// latencyJob carries the time it was enqueued, and whether it was
// enqueued during the measured window.
type latencyJob struct {
	EnqueuedAt time.Time `json:"enqueued_at"`
	Measured   bool      `json:"measured"`
}

// Kind implements bunqueue.JobArgs.
func (latencyJob) Kind() string { return "bunqueue_bench_latency" }

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
	db.AddQueryHook(client.QueryHook())

	var (
		mu        sync.Mutex
		latencies []time.Duration // of the measured jobs
		started   atomic.Int64
	)
	if err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[latencyJob](func(_ context.Context, _ bun.IDB, job *bunqueue.Job[latencyJob]) error {
		d := time.Now().UTC().Sub(job.Args.EnqueuedAt)
		started.Add(1)
		if job.Args.Measured {
			mu.Lock()
			latencies = append(latencies, d)
			mu.Unlock()
		}
		return nil
	})); err != nil {
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

	// The producer: one job every 1/perSecond, catching up when late.
	interval := time.Second / time.Duration(perSecond)
	began := time.Now()
	windowStart := began.Add(b.warmup)
	end := windowStart.Add(b.duration)
	var enqueued, inWindow int64
	var first, last time.Time        // of the measured enqueues
	var enqueueTimes []time.Duration // how long the measured Enqueue calls took
	var prodErr error
	for i := 0; ; i++ {
		next := began.Add(time.Duration(i) * interval)
		if !next.Before(end) {
			break
		}
		if err := sleep(ctx, time.Until(next)); err != nil {
			prodErr = err
			break
		}
		now := time.Now()
		measured := !now.Before(windowStart)
		if measured && inWindow == 0 {
			first = now
		}
		if _, err := client.Enqueue(ctx, db, latencyJob{EnqueuedAt: now.UTC(), Measured: measured}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
			prodErr = fmt.Errorf("enqueue: %w", err)
			break
		}
		enqueued++
		if measured {
			inWindow++
			last = now
			enqueueTimes = append(enqueueTimes, time.Since(now))
		}
	}
	// Give the last jobs up to 2 s to start.
	for deadline := time.Now().Add(2 * time.Second); started.Load() < enqueued && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	rss := readRSS()
	if err := stopClient(); prodErr == nil && err != nil {
		prodErr = fmt.Errorf("stop the client: %w", err)
	}
	if prodErr != nil {
		return result{}, prodErr
	}

	mu.Lock()
	lat := slices.Clone(latencies)
	mu.Unlock()
	if inWindow < 2 || len(lat) == 0 {
		return result{}, errors.New("no job was enqueued and started during the measured window")
	}
	window := last.Sub(first).Seconds()
	note := fmt.Sprintf("%d enqueued in the window (%.0f/s, one autocommit INSERT each, the Enqueue call took p50 %.2f ms, p99 %.2f ms), %d started",
		inWindow, float64(inWindow)/window, *percentile(enqueueTimes, 0.5), *percentile(enqueueTimes, 0.99), len(lat))
	if missing := inWindow - int64(len(lat)); missing > 0 {
		note += fmt.Sprintf("; %d NOT started within 2 s of the end (not in the percentiles)", missing)
	}
	return result{
		ItemsPerSec: float64(len(lat)) / window,
		P50ms:       percentile(lat, 0.50), P95ms: percentile(lat, 0.95), P99ms: percentile(lat, 0.99),
		RSSKiB: rss,
		Note:   note,
	}, nil
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
