package bunqueue_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// The workload most scenarios share: one queue of a mode, run by in-process
// clients.

// relFaultDB opens a *bun.DB over in, on the server the tests run on,
// with at most maxConns connections (0: no limit), closed when the test
// ends.
func relFaultDB(t *testing.T, in *faultdriver.Injector, maxConns int) *bun.DB {
	t.Helper()
	sqldb, err := in.Open(dbtest.ServerDSN())
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	var db *bun.DB
	if dbtest.IsPostgres() {
		db = bun.NewDB(sqldb, pgdialect.New())
	} else {
		db = bun.NewDB(sqldb, mysqldialect.New())
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// relWorkload is one queue of a mode, run by several in-process clients
// (each with its own pool over the injector), whose handlers record their
// runs and write one effect per run through the item's transaction (lock
// modes) or the *bun.DB (lease mode).
type relWorkload struct {
	t       *testing.T
	mode    string // "table", "lock", "lease"
	db      *bun.DB
	effects string
	run     string // table mode
	queue   string // jobs modes
	rec     relRecorder
	clients []*bunqueue.Client
	work    time.Duration // each run sleeps up to this long
	// slow, if set, makes a run on item sleep at least this long.
	slow func(item int64) time.Duration
	// ignoreCtx makes runs sleep through their context's end, as a
	// worker that does not honour it would.
	ignoreCtx bool
	// fail, if set, is called at the start of each run: an error it
	// returns is the run's result.
	fail func(ctx context.Context, db bun.IDB, item int64) error
	// timeout is the Timeout of the any-table queue, and of the jobs
	// queue in lock mode.
	timeout time.Duration
	// lease is the lease of lease mode (default 2 s).
	lease time.Duration
	// connOf: record each run's server connection (lock modes).
	connOf   bool
	producer *bunqueue.Client
}

type relFaultItem struct {
	bun.BaseModel `bun:"table:bq_rel_item,alias:i"`
	ID            int64 `bun:",pk,autoincrement"`
	Run           string
	Status        string
	Attempts      int
	RetryAt       *time.Time
}

const relItemDDL = "CREATE TABLE IF NOT EXISTS bq_rel_item (id BIGINT AUTO_INCREMENT PRIMARY KEY, run CHAR(16) NOT NULL, " +
	"status VARCHAR(8) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, retry_at DATETIME(6) NULL, " +
	"INDEX (run, status, id)) ENGINE=InnoDB"

func relItemQuery(run string) bunqueue.QueryFunc {
	return func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("run = ?", run).Where("status = 'waiting'").
			Where("retry_at IS NULL OR retry_at <= " + nowSQL(q)).Order("id")
	}
}

type relJobArgs struct {
	N int64 `json:"n"`
}

func (relJobArgs) Kind() string { return "bq_rel_job" }

// newRelWorkload prepares the queue of mode: its table or jobs queue and
// its effects table, cleaned up when the test ends.
func newRelWorkload(t *testing.T, db *bun.DB, mode string) *relWorkload {
	t.Helper()
	w := &relWorkload{t: t, mode: mode, db: db, effects: relEffectsTable(t, db, "bq_rel_eff")}
	switch mode {
	case "table":
		dbtest.Exec(t, db, relItemDDL)
		w.run = relToken(8)
		t.Cleanup(func() { relDeleteRun(db, "bq_rel_item", w.run) })
	default:
		w.queue = ownJobQueue(t, db)
		w.producer = jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{w.queue: {}}})
	}
	return w
}

func (w *relWorkload) modeName() string {
	if w.mode == "table" {
		return "any table"
	}
	return "jobs, " + w.mode + " mode"
}

// handlerRun is the body every handler runs on an item: record the run,
// write the effect through db, wait, and (table mode) take the row out.
func (w *relWorkload) handlerRun(ctx context.Context, db bun.IDB, item int64, who string, done func() error) error {
	var conn int64
	if w.connOf {
		var err error
		if conn, err = dialectOf(db).SessionID(ctx, db); err != nil {
			return err
		}
	}
	defer w.rec.begin(item, conn, who)()
	if w.fail != nil {
		if err := w.fail(ctx, db, item); err != nil {
			return err
		}
	}
	if _, err := db.NewRaw("INSERT INTO ? (item, token, who) VALUES (?, ?, ?)", bun.Ident(w.effects), item, relToken(8), who).Exec(ctx); err != nil {
		return err
	}
	d := rand.N(w.work + 1)
	if w.slow != nil {
		d = max(d, w.slow(item))
	}
	if w.ignoreCtx {
		time.Sleep(d)
	} else if err := relSleep(ctx, d); err != nil {
		return err
	}
	if done != nil {
		return done()
	}
	return nil
}

// addClient adds a client over db with workers workers and batches of
// batch; onError is the any-table queue's OnError (nil for none).
func (w *relWorkload) addClient(db *bun.DB, workers, batch int, cfg bunqueue.Config, onError func(ctx context.Context, tx bun.Tx, it *relFaultItem, err error) error) *bunqueue.Client {
	t := w.t
	t.Helper()
	who := fmt.Sprintf("client %d", len(w.clients))
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Backoff == nil {
		cfg.Backoff = fastBackoff
	}
	var c *bunqueue.Client
	var err error
	switch w.mode {
	case "table":
		c, err = bunqueue.NewClient(db, &cfg)
		require.NoError(t, err)
		require.NoError(t, c.Add(bunqueue.NewQueue("bq_rel_"+w.run, relItemQuery(w.run),
			func(ctx context.Context, tx bun.Tx, it *relFaultItem) error {
				return w.handlerRun(ctx, tx, it.ID, who, func() error {
					_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
					return err
				})
			}, &bunqueue.QueueConfig[relFaultItem]{Workers: workers, BatchSize: batch, Cooldown: 50 * time.Millisecond, Timeout: w.timeout, OnError: onError})))
	default:
		mode := bunqueue.ModeLock
		if w.mode == "lease" {
			mode = bunqueue.ModeLease
		}
		qc := bunqueue.JobQueueConfig{Workers: workers, BatchSize: batch, Mode: mode, Lease: cmp.Or(w.lease, 2*time.Second)}
		if mode == bunqueue.ModeLock {
			qc.Timeout = w.timeout
		}
		cfg.JobQueues = map[string]bunqueue.JobQueueConfig{w.queue: qc}
		c, err = bunqueue.NewClient(db, &cfg)
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[relJobArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relJobArgs]) error {
			return w.handlerRun(ctx, db, job.Args.N, who, nil)
		})))
	}
	w.clients = append(w.clients, c)
	return c
}

// produce adds items from+1 … to (jobs: N from+1 … to).
func (w *relWorkload) produce(from, to int) error {
	if from >= to {
		return nil
	}
	if w.mode == "table" {
		var b strings.Builder
		b.WriteString("INSERT INTO bq_rel_item (run) VALUES ")
		for i := from; i < to; i++ {
			if i > from {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s')", w.run)
		}
		_, err := w.db.Exec(b.String())
		return err
	}
	jobs := make([]bunqueue.EnqueueParams, 0, to-from)
	for n := from; n < to; n++ {
		jobs = append(jobs, bunqueue.EnqueueParams{Args: relJobArgs{N: int64(n + 1)}, Opts: &bunqueue.EnqueueOpts{Queue: w.queue}})
	}
	_, err := w.producer.EnqueueMany(context.Background(), w.db, jobs)
	return err
}

// produceOver adds items spread over d, in the background; the channel
// gets the result.
func (w *relWorkload) produceOver(items int, d time.Duration) <-chan error {
	done := make(chan error, 1)
	chunks := max(int(d/(50*time.Millisecond)), 1)
	go func() {
		for c := range chunks {
			if err := w.produce(c*items/chunks, (c+1)*items/chunks); err != nil {
				done <- err
				return
			}
			time.Sleep(d / time.Duration(chunks))
		}
		done <- nil
	}()
	return done
}

// remaining counts the items not finished.
func (w *relWorkload) remaining() int {
	if w.mode == "table" {
		return count(w.t, w.db, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'waiting'", w.run)
	}
	return count(w.t, w.db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND state = 0", w.queue)
}

func (w *relWorkload) start() {
	for _, c := range w.clients {
		start(w.t, c)
	}
}

func (w *relWorkload) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range w.clients {
		require.NoError(w.t, c.Stop(ctx))
	}
}

// check fills rep with the figures of a drained run of items items (or
// jobs N 1 … items) and fails the test on a violation. held, if set, is
// when a run stopped holding its item (see relOverlaps).
func (w *relWorkload) check(rep *relReport, items int, held func(relRun) int64) {
	t := w.t
	t.Helper()
	runs := w.rec.all()
	n, examples := relOverlaps(runs, held)
	rep.Concurrent = n
	_, twice := relEffects(t, w.db, w.effects)
	rep.Twice = twice
	rep.TwiceOK = w.mode == "lease"
	rep.Enqueued = items
	var failed int
	switch w.mode {
	case "table":
		rep.Processed = count(t, w.db, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'done'", w.run)
		failed = count(t, w.db, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'failed'", w.run)
		rep.Lost = items - rep.Processed - failed
	default:
		failed = count(t, w.db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", w.queue)
		rep.Processed = count(t, w.db, "SELECT COUNT(DISTINCT item) FROM "+w.effects+" WHERE item BETWEEN 1 AND ?", items)
		rep.Lost = items - rep.Processed - failed
	}
	rep.note("%d handler runs", len(runs))
	if failed > 0 {
		rep.note("%d failed for good", failed)
	}
	rep.log(t)
	require.Zero(t, rep.Lost, "items lost")
	require.Zero(t, n, "two runs of one item held it at once: %v", examples)
	if !rep.TwiceOK {
		require.Zero(t, twice, "items whose effect committed twice")
		if w.mode == "table" {
			done := count(t, w.db, "SELECT COUNT(DISTINCT e.item) FROM "+w.effects+" e JOIN bq_rel_item i ON i.id = e.item WHERE i.status = 'done'")
			waiting := count(t, w.db, "SELECT COUNT(*) FROM "+w.effects+" e JOIN bq_rel_item i ON i.id = e.item WHERE i.status = 'waiting'")
			require.Equal(t, rep.Processed, done, "every done item has its effect")
			require.Zero(t, waiting, "no item still waiting has an effect")
		}
	}
}

// start2 starts one more client of the workload.
func (w *relWorkload) start2(c *bunqueue.Client) { start(w.t, c) }
