package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// The fleet scenarios run one queue from several clients, each with a
// connection pool of its own, as several app servers on one database do,
// while a producer per client enqueues: the clients read keys ahead on
// their own and collide on the same rows and index records, which one
// client never does (RELIABILITY.md, item 16). Their rows count the
// deadlock retries and the handler re-runs that costs.

// fleetClients is how many clients (app servers) a fleet scenario runs.
const fleetClients = 3

// fleetRateDefault is the enqueues per second of each client's producer.
const fleetRateDefault = 300

// fleetMinFull is the least time the queue must stay full for its rate
// to be the row's; else the row's rate is over the whole run.
const fleetMinFull = 100 * time.Millisecond

// fleetMinLimit is the least time a fleet's producers may enqueue, and
// its clients then get to handle what is left.
const fleetMinLimit = 10 * time.Second

// fleet is the shape of a fleet scenario.
type fleet struct {
	kind    string  // "lock", "lease" (the jobs table) or "table" (bench_items)
	clients int     // clients, each with its pool and its producer
	workers int     // workers per client
	factor  float64 // its expected rate, in multiples of the 16-connection ceiling (see fleetBacklogFor)
}

// fleetScenarios returns the fleet scenarios: lock mode, lease mode and an
// any-table queue, each with the default workers per client and with 16,
// batches left self-sized as by default.
func fleetScenarios() []scenario {
	var list []scenario
	for _, k := range []struct {
		kind, what string
		factor     float64
	}{
		// About their rates, in multiples of the ceiling, with one
		// client (jobs-defaults, table-defaults) or less.
		{"lock", "jobs table, lock mode", 2},
		{"lease", "jobs table, lease mode", 0.5},
		{"table", "any-table queue", 1},
	} {
		for _, w := range []int{bunqueue.WorkersDefault, workers} {
			f := fleet{kind: k.kind, clients: fleetClients, workers: w, factor: k.factor}
			list = append(list, scenario{
				name: fmt.Sprintf("fleet-%s-%dx%d", k.kind, f.clients, w),
				desc: fmt.Sprintf("%s, %d clients with pools of their own × %d workers, a producer each (--fleet-rate)", k.what, f.clients, w),
				// The 16-connection ceiling, as the other rows' are: they
				// compare with each other and with jobs-lock-b1 and the like.
				concurrency: f.clients * w, ratioTo: workers,
				run: func(ctx context.Context, b *bench) (result, error) { return b.runFleet(ctx, f) },
			})
		}
	}
	return list
}

// fleetQueue is what a fleet's clients share: the jobs table's queue or
// bench_items.
type fleetQueue interface {
	// fill makes the queue hold n items and nothing else.
	fill(ctx context.Context, admin *bun.DB, n int) error
	// client returns a client of db whose handler counts its runs in t.
	client(db *bun.DB, t *tally) (*bunqueue.Client, error)
	// enqueue adds one item through c and db, as an app server would.
	enqueue(ctx context.Context, c *bunqueue.Client, db *bun.DB) error
	// left counts the items still waiting.
	left(ctx context.Context, admin *bun.DB) (int, error)
	// close removes the queue's items or table.
	close()
	// note describes the queue.
	note() string
}

// fleetMember is one client of a fleet, on its own pool.
type fleetMember struct {
	db     *bun.DB
	client *bunqueue.Client
}

// runFleet runs the fleet scenario f.
func (b *bench) runFleet(ctx context.Context, f fleet) (result, error) {
	admin, err := b.open(ctx, 4)
	if err != nil {
		return result{}, err
	}
	defer admin.Close()
	q := b.fleetQueue(f)
	defer q.close()
	n := b.fleetBacklogFor(f)
	if err := q.fill(ctx, admin, n); err != nil {
		return result{}, err
	}
	t := b.newTally()
	members, err := b.fleetMembers(ctx, f, q, t)
	defer func() {
		for _, m := range members {
			_ = m.db.Close()
		}
	}()
	if err != nil {
		return result{}, err
	}
	st, err := b.fleetRun(ctx, q, members, t, n, f.clients*f.workers)
	if err != nil {
		return result{}, err
	}
	left, err := q.left(ctx, admin)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: b.fleetNote(f, q, st, n, left)}, nil
}

// fleetBacklogFor returns the backlog of f: --fleet-backlog, else what f
// would take in half the warm-up and window at its factor × the
// 16-connection ceiling: long enough to measure its rate, short enough
// for the scenario.
func (b *bench) fleetBacklogFor(f fleet) int {
	if b.fleetBacklog > 0 {
		return b.fleetBacklog
	}
	c, ok := b.ceiling[workers]
	if !ok || c <= 0 {
		c = fallbackCeiling
	}
	return max(int(c*f.factor*(b.warmup+b.duration).Seconds()/2), 1000)
}

// fleetQueue returns the queue of f.
func (b *bench) fleetQueue(f fleet) fleetQueue {
	if f.kind == "table" {
		return &fleetTable{b: b, cfg: &bunqueue.QueueConfig[benchItem]{Workers: f.workers}}
	}
	mode := bunqueue.ModeLock
	if f.kind == "lease" {
		mode = bunqueue.ModeLease
	}
	return &fleetJobs{b: b, queue: fmt.Sprintf("bench_fleet_%s_%dx%d", f.kind, f.clients, f.workers),
		cfg: bunqueue.JobQueueConfig{Workers: f.workers, Mode: mode}}
}

// fleetMembers opens f's clients, each on a pool of its own: its workers,
// the engine's own connections and its producer's.
func (b *bench) fleetMembers(ctx context.Context, f fleet, q fleetQueue, t *tally) ([]fleetMember, error) {
	var members []fleetMember
	for range f.clients {
		db, err := b.open(ctx, f.workers+4)
		if err != nil {
			return members, err
		}
		members = append(members, fleetMember{db: db})
		c, err := q.client(db, t)
		if err != nil {
			return members, err
		}
		members[len(members)-1].client = c
	}
	return members, nil
}

// fleetStats is what a fleet's run saw.
type fleetStats struct {
	production fleetProduction
	rate       float64       // items per second while the queue was full (see fleetRun)
	full       time.Duration // how long the queue stayed full: the rate's window
	empty      bool          // it ran empty before the end
	producing  time.Duration // how long the producers enqueued
	elapsed    time.Duration // from the start to the last item handled, or the limit
	drained    bool          // every item was handled before the limit
	handled    int64         // items handled
	rssKiB     int64
}

// fleetRun starts the members and their producers, and waits until the
// members handled every item: the backlog of n and what the producers
// enqueued. The queue is full at first, then runs empty and the members
// take the producers' items as they come, where clients meet producers;
// the producers stop once that went on for a window (see
// producersDone), and the members handle the last items. The rate is that
// of the full queue: until fewer items waited than the members have
// workers. It stops waiting fleetLimit after the producers.
func (b *bench) fleetRun(ctx context.Context, q fleetQueue, members []fleetMember, t *tally, n int, workers int) (fleetStats, error) {
	began, m0 := time.Now(), b.sampleMeters(ctx)
	for _, m := range members {
		if err := m.client.Start(ctx); err != nil {
			_ = stopFleet(ctx, members)
			return fleetStats{}, err
		}
	}
	var made atomic.Int64
	var stop atomic.Bool
	produced := make(chan fleetProduction, 1)
	go func() { produced <- b.fleetProduce(ctx, q, members, &made, &stop) }()
	st, fullDone := b.followFleet(began, &t.done, &made, int64(n), int64(workers), &stop, produced)
	st.elapsed, st.handled = time.Since(began), t.done.Load()
	b.windowCosts(m0, b.sampleMeters(ctx), st.handled)
	if st.full < fleetMinFull { // the queue never ran empty, or it did at once
		st.full, fullDone = st.elapsed, st.handled
	}
	st.rate, st.rssKiB = float64(fullDone)/st.full.Seconds(), readRSS()
	return st, cmpErr(st.production.err, stopFleet(ctx, members))
}

// followFleet samples a fleet's counts, notes when fewer than low items
// first waited and how many were done by then, tells the producers to
// stop when producersDone says so, and returns once every item was
// handled, or fleetLimit after the producers stopped.
func (b *bench) followFleet(began time.Time, done, made *atomic.Int64, n, low int64, stop *atomic.Bool, produced <-chan fleetProduction) (st fleetStats, fullDone int64) {
	var deadline time.Time
	for ; ; time.Sleep(5 * time.Millisecond) {
		d, elapsed := done.Load(), time.Since(began)
		if !st.empty && n+made.Load()-d < low {
			st.empty, st.full, fullDone = true, elapsed, d
		}
		if !stop.Load() && b.producersDone(st, elapsed) {
			stop.Store(true)
			st.producing = elapsed
		}
		if deadline.IsZero() {
			select {
			case st.production = <-produced:
				deadline = time.Now().Add(b.fleetLimit())
			default:
				continue
			}
		}
		if st.drained = d >= st.production.total(int(n)); st.drained || st.production.err != nil || time.Now().After(deadline) {
			return st, fullDone
		}
	}
}

// producersDone reports whether a fleet's producers, at elapsed, have
// enqueued long enough: for the warm-up and the window, and a window
// after the queue ran empty, or for fleetLimit whatever happened.
func (b *bench) producersDone(st fleetStats, elapsed time.Duration) bool {
	return elapsed >= b.fleetLimit() ||
		elapsed >= b.warmup+b.duration && st.empty && elapsed-st.full >= b.duration
}

// fleetLimit bounds a fleet's producers, and then its wait for the last
// items: four times the warm-up and window, at least fleetMinLimit.
func (b *bench) fleetLimit() time.Duration {
	return max(fleetMinLimit, 4*(b.warmup+b.duration))
}

// fleetProduction is what a fleet's producers did.
type fleetProduction struct {
	enqueued, failed int64 // enqueues made, and those of them that failed
	err              error // one that stopped a producer
}

// total is the items there are to handle: the backlog of n and what the
// producers enqueued.
func (p fleetProduction) total(n int) int64 { return int64(n) + p.enqueued - p.failed }

// fleetProduce runs a producer per member (fleetProducer) until stop, and
// counts the items enqueued in made as it goes.
func (b *bench) fleetProduce(ctx context.Context, q fleetQueue, members []fleetMember, made *atomic.Int64, stop *atomic.Bool) fleetProduction {
	var failed atomic.Int64
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = b.fleetProducer(ctx, q, m, made, &failed, stop) })
	}
	wg.Wait()
	p := fleetProduction{enqueued: made.Load() + failed.Load(), failed: failed.Load()}
	for _, e := range errs {
		p.err = cmpErr(p.err, e)
	}
	return p
}

// fleetProducer enqueues --fleet-rate items a second through m's client
// and pool, catching up when late, until stop. An enqueue that fails is
// counted in failed, and the producer goes on; one in flight when stop is
// set completes, so that made is exact.
func (b *bench) fleetProducer(ctx context.Context, q fleetQueue, m fleetMember, made, failed *atomic.Int64, stop *atomic.Bool) error {
	interval := time.Second / time.Duration(b.fleetRate)
	began := time.Now()
	for i := 0; !stop.Load(); i++ {
		if err := sleep(ctx, time.Until(began.Add(time.Duration(i)*interval))); err != nil {
			return err
		}
		switch err := q.enqueue(ctx, m.client, m.db); {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			failed.Add(1)
		default:
			made.Add(1)
		}
	}
	return nil
}

// cmpErr returns err, or next if err is nil.
func cmpErr(err, next error) error {
	if err != nil {
		return err
	}
	return next
}

// stopFleet stops every member's client at once, as app servers shut down
// each on its own.
func stopFleet(ctx context.Context, members []fleetMember) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m.client != nil {
			wg.Go(func() { errs[i] = m.client.Stop(stopCtx) })
		}
	}
	wg.Wait()
	var err error
	for _, e := range errs {
		err = cmpErr(err, e)
	}
	if err != nil {
		return fmt.Errorf("stop a client: %w", err)
	}
	return nil
}

// fleetNote describes a fleet's run: its shape, its load, and whether
// every item was handled.
func (b *bench) fleetNote(f fleet, q fleetQueue, st fleetStats, n, left int) string {
	p := st.production
	s := fmt.Sprintf("%d clients, each with a pool of its own (%d connections) and %d workers, batches self-sized; %s; "+
		"backlog %d, and %d enqueued by the producers in %.1f s (%.0f/s of the %d/s asked, one autocommit INSERT per item)",
		f.clients, f.workers+4, f.workers, q.note(), n, p.enqueued, st.producing.Seconds(),
		float64(p.enqueued)/max(st.producing.Seconds(), 1e-3), b.fleetRate*f.clients)
	if p.failed > 0 {
		s += fmt.Sprintf(", %d of which FAILED", p.failed)
	}
	switch {
	case !st.empty:
		s += "; the queue never ran empty: rate over the whole run"
	case st.full == st.elapsed:
		s += fmt.Sprintf("; the queue ran empty within %s: rate over the whole run", fleetMinFull)
	default:
		s += fmt.Sprintf("; rate over the first %.1f s, until fewer items waited than the clients have workers", st.full.Seconds())
	}
	if st.drained && left == 0 {
		return s + fmt.Sprintf("; all handled after %.1f s, none left", st.elapsed.Seconds())
	}
	return s + fmt.Sprintf("; after %.1f s, %d of %d items handled, %d left waiting: NOT drained",
		st.elapsed.Seconds(), st.handled, p.total(n), left)
}

// fleetJobs is a fleet's queue of the jobs table.
type fleetJobs struct {
	b       *bench
	queue   string
	cfg     bunqueue.JobQueueConfig
	cleanup func() // deletes the queue's jobs
}

func (q *fleetJobs) fill(ctx context.Context, admin *bun.DB, n int) error {
	// A client that runs no worker, to enqueue the backlog.
	c, cleanup, err := q.b.jobsClient(ctx, admin, q.queue, q.cfg)
	if err != nil {
		return err
	}
	q.cleanup = cleanup
	if err := enqueueBacklog(ctx, c, admin, q.queue, n); err != nil {
		return err
	}
	// PostgreSQL: the dead row versions the scenarios before left in the
	// jobs table (autovacuum may be off) would weigh on the claims.
	return execAll(ctx, admin, q.b.sql.vacuum(jobsTable)...)
}

func (q *fleetJobs) client(db *bun.DB, t *tally) (*bunqueue.Client, error) {
	c, err := bunqueue.NewClient(db, q.b.config(bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{q.queue: q.cfg}}))
	if err != nil {
		return nil, err
	}
	return c, bunqueue.AddWorker(c, countingWorker(t))
}

func (q *fleetJobs) enqueue(ctx context.Context, c *bunqueue.Client, db *bun.DB) error {
	_, err := c.Enqueue(ctx, db, benchJob{}, &bunqueue.EnqueueOpts{Queue: q.queue})
	return err
}

func (q *fleetJobs) left(ctx context.Context, admin *bun.DB) (int, error) {
	var n int
	err := admin.NewRaw("SELECT COUNT(*) FROM ? WHERE queue = ?", bun.Ident(jobsTable), q.queue).Scan(ctx, &n)
	return n, err
}

func (q *fleetJobs) close() {
	if q.cleanup != nil {
		q.cleanup()
	}
}

func (q *fleetJobs) note() string {
	s := "jobs queue " + q.queue
	if v := q.b.sql.vacuum(jobsTable); len(v) > 0 {
		s += ", " + v[0] + " before it"
	}
	return s
}

// fleetTable is a fleet's any-table queue over bench_items.
type fleetTable struct {
	b     *bench
	cfg   *bunqueue.QueueConfig[benchItem]
	admin *bun.DB
}

func (q *fleetTable) fill(ctx context.Context, admin *bun.DB, n int) error {
	q.admin = admin
	_, err := q.b.createItems(ctx, admin, n)
	return err
}

func (q *fleetTable) client(db *bun.DB, t *tally) (*bunqueue.Client, error) {
	c, err := bunqueue.NewClient(db, q.b.config(bunqueue.Config{}))
	if err != nil {
		return nil, err
	}
	return c, c.Add(q.b.itemsQueue(t, q.cfg))
}

func (q *fleetTable) enqueue(ctx context.Context, _ *bunqueue.Client, db *bun.DB) error {
	_, err := db.ExecContext(ctx, "INSERT INTO "+itemsTable+" (status) VALUES ('waiting')")
	return err
}

func (q *fleetTable) left(ctx context.Context, admin *bun.DB) (int, error) {
	var n int
	err := admin.NewRaw("SELECT COUNT(*) FROM "+itemsTable+" WHERE status = 'waiting'").Scan(ctx, &n)
	return n, err
}

func (q *fleetTable) close() {
	if q.admin != nil {
		dropTables(q.admin, itemsTable)
	}
}

func (q *fleetTable) note() string { return itemsTable + ", the handler's UPDATE by primary key" }
