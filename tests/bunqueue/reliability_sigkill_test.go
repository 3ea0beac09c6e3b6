package bunqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Scenario 1: worker processes (the test binary, re-executed) killed with
// SIGKILL about every half second and restarted, while a producer adds
// items: an any-table queue, the jobs table in lock mode and in lease mode.

// relWorkerEnv, when set, makes TestMain run runRelWorkerProcess (with
// this JSON relWorkerConfig) instead of the tests.
const relWorkerEnv = "BUNQUEUE_TEST_REL_WORKER"

type relWorkerConfig struct {
	Mode    string        `json:"mode"` // "table", "lock" or "lease"
	Run     string        `json:"run"`  // the any-table queue's run id
	Queue   string        `json:"queue"`
	Effects string        `json:"effects"`
	Events  string        `json:"events"`
	Workers int           `json:"workers"`
	Batch   int           `json:"batch"`
	Lease   time.Duration `json:"lease"`
	Work    time.Duration `json:"work"`  // a run sleeps up to this long
	Limit   int           `json:"limit"` // the queue's GlobalLimit
	Block   bool          `json:"block"` // a run waits until the process is killed
}

// relKillItem is a row of the any-table queue of scenario 1. The table is
// shared by concurrent runs of the test, told apart by run.
type relKillItem struct {
	bun.BaseModel `bun:"table:bq_rel_kill_item,alias:i"`
	ID            int64 `bun:",pk,autoincrement"`
	Run           string
	Status        string
}

const relKillItemDDL = "CREATE TABLE IF NOT EXISTS bq_rel_kill_item (id BIGINT AUTO_INCREMENT PRIMARY KEY, " +
	"run CHAR(16) NOT NULL, status VARCHAR(8) NOT NULL DEFAULT 'waiting', INDEX (run, status, id)) ENGINE=InnoDB"

func relKillQuery(run string) bunqueue.QueryFunc {
	return func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("run = ?", run).Where("status = 'waiting'").Order("id")
	}
}

type relKillArgs struct {
	N int64 `json:"n"`
}

func (relKillArgs) Kind() string { return "bq_rel_kill" }

// runRelWorkerProcess is a worker process of scenario 1: a client of one
// queue whose handlers record their runs in the events file and their
// effect in the effects table. It stops gracefully on SIGTERM.
func runRelWorkerProcess() int {
	var cfg relWorkerConfig
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := json.Unmarshal([]byte(os.Getenv(relWorkerEnv)), &cfg); err != nil {
		log.Error("config", "error", err)
		return 2
	}
	f, err := os.OpenFile(cfg.Events, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Error("events", "error", err)
		return 2
	}
	ev := &relEventFile{f: f}
	db, err := dbtest.OpenDB()
	if err != nil {
		log.Error("open", "error", err)
		return 2
	}
	db.SetMaxOpenConns(cfg.Workers + 4)
	who := "pid " + strconv.Itoa(os.Getpid())
	work := func(ctx context.Context) error {
		if cfg.Block {
			<-ctx.Done()
			return ctx.Err()
		}
		return relSleep(ctx, rand.N(cfg.Work+1))
	}
	ccfg := &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: log, Backoff: fastBackoff}
	var c *bunqueue.Client
	switch cfg.Mode {
	case "table":
		if c, err = bunqueue.NewClient(db, ccfg); err != nil {
			break
		}
		err = c.Add(bunqueue.NewQueue("bq_rel_kill_"+cfg.Run, relKillQuery(cfg.Run),
			func(ctx context.Context, tx bun.Tx, it *relKillItem) error {
				defer ev.begin(it.ID, 0)()
				if _, err := tx.NewRaw("INSERT INTO ? (item, who) VALUES (?, ?)", bun.Ident(cfg.Effects), it.ID, who).Exec(ctx); err != nil {
					return err
				}
				if err := work(ctx); err != nil {
					return err
				}
				_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
				return err
			}, &bunqueue.QueueConfig[relKillItem]{Workers: cfg.Workers, BatchSize: cfg.Batch, GlobalLimit: cfg.Limit}))
	case "lock", "lease":
		mode := bunqueue.ModeLock
		if cfg.Mode == "lease" {
			mode = bunqueue.ModeLease
		}
		ccfg.JobQueues = map[string]bunqueue.JobQueueConfig{cfg.Queue: {Workers: cfg.Workers, BatchSize: cfg.Batch, Mode: mode, Lease: cfg.Lease, GlobalLimit: cfg.Limit}}
		if c, err = bunqueue.NewClient(db, ccfg); err != nil {
			break
		}
		err = bunqueue.AddWorker(c, bunqueue.WorkerFunc[relKillArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relKillArgs]) error {
			defer ev.begin(job.Args.N, 0)()
			// Lock mode: db is the job's transaction. Lease mode: the
			// *bun.DB, so the effect commits at once (at least once).
			if _, err := db.NewRaw("INSERT INTO ? (item, who) VALUES (?, ?)", bun.Ident(cfg.Effects), job.Args.N, who).Exec(ctx); err != nil {
				return err
			}
			return work(ctx)
		}))
	default:
		err = fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	// SIGTERM is handled from before Start: a stop sent while it starts
	// waits for it, and then stops the client gracefully.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = c.Start(ctx)
		cancel()
	}
	if err != nil {
		log.Error("start", "error", err)
		return 2
	}
	orphaned := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // EOF: the test process is gone
		close(orphaned)
	}()
	select {
	case <-orphaned:
		log.Error("the test process is gone")
		return 5
	case <-sig:
	case <-time.After(30 * time.Minute):
		log.Error("not stopped within 30 minutes")
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		log.Error("stop", "error", err)
		return 4
	}
	return 0
}

// relTail keeps the last 32 KiB written to it.
type relTail struct {
	mu  sync.Mutex
	buf []byte
}

func (w *relTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 32<<10 {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-32<<10:]...)
	}
	return len(p), nil
}

func (w *relTail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}

// relProc is one incarnation of a worker process.
type relProc struct {
	slot, inc int
	cmd       *exec.Cmd
	out       *relTail
	events    string
	killedAt  int64 // when SIGKILL was sent (Unix ns); 0 if it was not killed
	exit      chan struct{}
	err       error
}

// relFleet runs worker processes, one per slot, and restarts a slot after
// it is killed.
type relFleet struct {
	t       *testing.T
	base    relWorkerConfig
	batches []int // per slot
	dir     string
	slots   []*relProc
	all     []*relProc
}

func newRelFleet(t *testing.T, base relWorkerConfig, batches []int) *relFleet {
	f := &relFleet{t: t, base: base, batches: batches, dir: t.TempDir(), slots: make([]*relProc, len(batches))}
	t.Cleanup(func() {
		for _, p := range f.slots {
			if p == nil {
				continue
			}
			select {
			case <-p.exit:
			default:
				_ = p.cmd.Process.Kill()
				<-p.exit
			}
		}
		if t.Failed() {
			for _, p := range f.all {
				if out := p.out.String(); out != "" {
					t.Logf("worker process %d.%d (%v):\n%s", p.slot, p.inc, p.err, out)
				}
			}
		}
	})
	for i := range batches {
		f.start(i)
	}
	return f
}

func (f *relFleet) start(slot int) {
	f.t.Helper()
	exe, err := os.Executable()
	require.NoError(f.t, err)
	cfg := f.base
	cfg.Batch = f.batches[slot]
	p := &relProc{slot: slot, inc: len(f.all), out: &relTail{}, exit: make(chan struct{})}
	p.events = filepath.Join(f.dir, fmt.Sprintf("events-%d-%d", slot, p.inc))
	cfg.Events = p.events
	js, err := json.Marshal(cfg)
	require.NoError(f.t, err)
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), relWorkerEnv+"="+string(js))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// The process ends when its stdin does: when this one dies, however.
	_, err = p.cmd.StdinPipe()
	require.NoError(f.t, err)
	require.NoError(f.t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exit)
	}()
	f.slots[slot] = p
	f.all = append(f.all, p)
}

// kill sends SIGKILL to the process of slot, waits for it to end and
// starts another in its place.
func (f *relFleet) kill(slot int) {
	f.t.Helper()
	p := f.slots[slot]
	select {
	case <-p.exit:
		f.t.Fatalf("worker process %d.%d ended by itself: %v\n%s", p.slot, p.inc, p.err, p.out.String())
	default:
	}
	p.killedAt = time.Now().UnixNano()
	require.NoError(f.t, p.cmd.Process.Kill())
	<-p.exit
	f.start(slot)
}

// victim picks the slot to kill: one whose process is running a handler,
// waiting up to half a second for one to start (the workers can drain
// the producer's chunks faster than it adds them, and idle between
// them), else any.
func (f *relFleet) victim() int {
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, i := range rand.Perm(len(f.slots)) {
			if runs, _, _, err := relReadEvents(f.slots[i].events, "", 0); err == nil {
				for _, r := range runs {
					if r.End == r.Start { // not ended (yet)
						return i
					}
				}
			}
		}
	}
	return rand.N(len(f.slots))
}

// stop sends SIGTERM to every process and waits for them to stop
// gracefully.
func (f *relFleet) stop() {
	f.t.Helper()
	for _, p := range f.slots {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range f.slots {
		select {
		case <-p.exit:
			require.NoError(f.t, p.err, "worker process %d.%d stops gracefully:\n%s", p.slot, p.inc, p.out.String())
		case <-time.After(45 * time.Second):
			f.t.Fatalf("worker process %d.%d did not stop within 45 s", p.slot, p.inc)
		}
	}
}

// runs reads the runs of every incarnation; unfinished counts those that
// never ended in a process that was not killed, cut those a kill ended.
func (f *relFleet) runs() (all []relRun, unfinished, cut int) {
	f.t.Helper()
	for _, p := range f.all {
		runs, u, c, err := relReadEvents(p.events, fmt.Sprintf("process %d.%d", p.slot, p.inc), p.killedAt)
		require.NoError(f.t, err)
		all = append(all, runs...)
		unfinished += u
		cut += c
	}
	return all, unfinished, cut
}

// TestReliabilitySIGKILL is scenario 1: 4 worker processes, a random one
// killed with SIGKILL about every half second and restarted, while a
// producer adds the items (quick: 1,000 items, 5+ kills per mode; long:
// 20,000 items, 30+ kills per mode).
func TestReliabilitySIGKILL(t *testing.T) {
	relParallel(t)
	db := migrated(t, 0)
	dbtest.Exec(t, db, relKillItemDDL)
	for _, mode := range []string{"table", "lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			relSIGKILL(t, db, mode)
		})
	}
}

func relSIGKILL(t *testing.T, db *bun.DB, mode string) {
	items := relSize(1000, 20000)
	minKills := relSize(5, 30)
	interval := relSize(400*time.Millisecond, 500*time.Millisecond)
	effects := relEffectsTable(t, db, "bq_rel_kill_eff")
	rep := &relReport{Scenario: "SIGKILL of worker processes", Enqueued: items}
	base := relWorkerConfig{Mode: mode, Effects: effects, Workers: 4, Lease: 2 * time.Second, Work: 5 * time.Millisecond}
	batches := []int{1, 4, 1, 16}

	var produce func(from, to int) error
	var remaining func() int
	switch mode {
	case "table":
		rep.Mode = "any table"
		base.Run = relToken(8)
		t.Cleanup(func() { relDeleteRun(db, "bq_rel_kill_item", base.Run) })
		produce = func(from, to int) error {
			var b strings.Builder
			b.WriteString("INSERT INTO bq_rel_kill_item (run) VALUES ")
			for i := from; i < to; i++ {
				if i > from {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "('%s')", base.Run)
			}
			_, err := db.Exec(b.String())
			return err
		}
		remaining = func() int {
			return count(t, db, "SELECT COUNT(*) FROM bq_rel_kill_item WHERE run = ? AND status = 'waiting'", base.Run)
		}
	default:
		rep.Mode = "jobs, " + mode + " mode"
		base.Queue = ownJobQueue(t, db)
		if mode == "lease" {
			batches = []int{1, 4, 1, 8}
			rep.TwiceOK = true
		}
		producer := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{base.Queue: {}}})
		produce = func(from, to int) error {
			jobs := make([]bunqueue.EnqueueParams, 0, to-from)
			for n := from; n < to; n++ {
				jobs = append(jobs, bunqueue.EnqueueParams{Args: relKillArgs{N: int64(n + 1)}, Opts: &bunqueue.EnqueueOpts{Queue: base.Queue}})
			}
			_, err := producer.EnqueueMany(context.Background(), db, jobs)
			return err
		}
		remaining = func() int {
			return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", base.Queue)
		}
	}

	began := time.Now()
	fleet := newRelFleet(t, base, batches)

	// The producer spreads the items over the time the kills need.
	// The producer adds a quarter of the items at once, so that the
	// workers are busy from the start, and spreads the rest over the
	// time the kills need.
	spread := time.Duration(minKills) * interval * 11 / 10
	chunks := max(int(spread/(100*time.Millisecond)), 1)
	produced := make(chan error, 1)
	go func() {
		first := items / 4
		if err := produce(0, first); err != nil {
			produced <- err
			return
		}
		tick := time.NewTicker(spread / time.Duration(chunks))
		defer tick.Stop()
		rest := items - first
		for c := range chunks {
			if err := produce(first+c*rest/chunks, first+(c+1)*rest/chunks); err != nil {
				produced <- err
				return
			}
			<-tick.C
		}
		produced <- nil
	}()

	producing := true
	deadline := time.Now().Add(relSize(3*time.Minute, 20*time.Minute))
	for {
		time.Sleep(interval*3/4 + rand.N(interval/2))
		if producing {
			select {
			case err := <-produced:
				require.NoError(t, err)
				producing = false
			default:
			}
		}
		// The long part kills on until the backlog is nearly done, so that
		// the kills span the whole run; the quick part stops at its count.
		if !producing && rep.Kills >= minKills && (!relLong() || remaining() <= items/20) {
			break
		}
		require.False(t, time.Now().After(deadline), "the run did not get through %d items in time (%d kills)", items, rep.Kills)
		fleet.kill(fleet.victim())
		rep.Kills++
	}
	// The rest drains without kills: a lease-mode job held by a killed
	// process waits for its lease (2 s) to run out.
	drained := relWaitFor(relSize(2*time.Minute, 10*time.Minute), func() bool { return remaining() == 0 })
	fleet.stop()
	rep.Duration = time.Since(began)

	runs, unfinished, cut := fleet.runs()
	n, examples := relOverlaps(runs, nil)
	rep.Concurrent = n
	rep.note("%d handler runs in %d processes; %d runs were cut short by a kill", len(runs), len(fleet.all), cut)
	var effectItems int
	effectItems, rep.Twice = relEffects(t, db, effects)
	switch mode {
	case "table":
		rep.Processed = count(t, db, "SELECT COUNT(*) FROM bq_rel_kill_item WHERE run = ? AND status = 'done'", base.Run)
		rep.Lost = items - rep.Processed
		require.Equal(t, rep.Processed, effectItems, "every done item has its effect, and no other item has one")
	default:
		failed := count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", base.Queue)
		rep.Processed = effectItems
		rep.Lost = items - effectItems
		require.Zero(t, failed, "no job failed")
		require.Equal(t, items, count(t, db, "SELECT COUNT(DISTINCT item) FROM "+effects+" WHERE item BETWEEN 1 AND ?", items))
	}
	rep.log(t)
	require.True(t, drained, "the queue drained (%d items left)", remaining())
	require.Zero(t, unfinished, "a run started in a process that was stopped gracefully and never ended")
	require.Zero(t, rep.Lost, "items lost")
	require.Zero(t, n, "runs of one item overlapped: %v", examples)
	if !rep.TwiceOK {
		require.Zero(t, rep.Twice, "items whose effect committed twice")
	}
	require.GreaterOrEqual(t, rep.Kills, minKills)
	require.GreaterOrEqual(t, len(runs), items)
	require.Positive(t, cut, "some kill cut a run short")
}

// relDeleteRun deletes the rows of one run from a shared table, in chunks.
func relDeleteRun(db *bun.DB, table, run string) {
	for range 1000 {
		r, err := db.Exec("DELETE FROM "+table+" WHERE run = ? LIMIT 5000", run)
		if err != nil {
			return
		}
		if n, _ := r.RowsAffected(); n < 5000 {
			return
		}
	}
}
