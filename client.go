package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
	"go.opentelemetry.io/otel/metric"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/prepared"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Client runs the workers of its queues inside this process. Create it
// with NewClient, Add queues, Start it, and Stop it before the program
// exits.
type Client struct {
	db      *bun.DB
	cfg     Config
	dialect sqldialect.Dialect
	tel     *telemetry

	packetMu sync.Mutex
	packet   int // max_allowed_packet, once read

	mu       sync.Mutex
	kinds    map[string]runJob // job workers by kind
	queues   []AnyQueue
	names    map[string]bool
	started  bool
	stopped  bool
	stopping chan struct{}      // closed by Stop: claim no more
	cancel   context.CancelFunc // cancels the handlers' contexts
	workers  sync.WaitGroup
	depthReg metric.Registration // the queue depth gauge's callback

	// stmts are the statements prepared for the workers; nil with
	// Config.NoPreparedStatements, or where the dialect prepares none.
	stmts *prepared.Cache

	watching atomic.Pointer[watch] // set by Start: the runners QueryHook wakes, by table
	counts   counters              // what the workers did, for Stats
}

// NewClient returns a Client that works through db, a bun DB opened with
// bun's mysqldialect (MySQL 8.0.1+ or MariaDB 10.6+). cfg may be nil for
// defaults.
func NewClient(db *bun.DB, cfg *Config) (*Client, error) {
	if db == nil {
		return nil, errors.New("bunqueue: NewClient: db must not be nil")
	}
	d, err := sqldialect.For(db)
	if err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c)
	if err != nil {
		return nil, err
	}
	client := &Client{db: db, cfg: c, dialect: d, tel: tel, names: map[string]bool{}, kinds: map[string]runJob{}, stopping: make(chan struct{})}
	if !c.NoPreparedStatements && d.Placeholder(1) != "" {
		client.stmts = prepared.New(db.DB, func(text string, err error) {
			c.Logger.Debug("bunqueue: prepare a statement (it runs in text meanwhile)", "statement", text, "error", err)
		})
	}
	return client, nil
}

// Add adds a queue to the client. It checks the queue's declaration and
// configuration and returns an error naming what is wrong. Queues are
// added before Start; a queue belongs to one client.
func (c *Client) Add(q AnyQueue) error {
	if q == nil {
		return errors.New("bunqueue: Add: queue must not be nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unstarted(); err != nil {
		return err
	}
	if c.names[q.Name()] {
		return fmt.Errorf("bunqueue: queue %q: a queue with this name was already added", q.Name())
	}
	if err := q.attach(c); err != nil {
		return err
	}
	c.names[q.Name()] = true
	c.queues = append(c.queues, q)
	return nil
}

// Start checks the database and starts the workers of every queue. It
// refuses a server that does not skip locked rows (it proves this with two
// connections, using a two-row table named bunqueue_probe that it creates
// if missing), a queue whose table is missing or not InnoDB, and a
// connection pool too small for the workers. It explains each queue's
// query and logs a warning, naming an index that would serve it, if the
// plan scans or sorts (an error with Config.StrictQueryPlans). ctx bounds
// these checks only: the workers run until Stop.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unstarted(); err != nil {
		return err
	}
	runners := make([]*runner, len(c.queues))
	for i, q := range c.queues {
		runners[i] = q.runner()
	}
	jobs := len(c.kinds) > 0
	if jobs {
		runners = append(runners, c.jobRunners()...)
	}
	total := 0
	for _, r := range runners {
		total += r.workers
	}
	// Each worker holds a connection while it has work, each queue's feed
	// one for its reads while the queue has work, and the app's own
	// statements need one more; the probe below needs two.
	if need := max(total+len(runners)+1, 2); c.db.Stats().MaxOpenConnections > 0 && c.db.Stats().MaxOpenConnections < need {
		return fmt.Errorf("bunqueue: the connection pool allows %d connections but the queues run %d workers; "+
			"each worker holds a connection while it has work, each of the %d queues one for its reads, and the app needs more: "+
			"raise SetMaxOpenConns to at least %d (or 0 for no limit)", c.db.Stats().MaxOpenConnections, total, len(runners), need)
	}
	if err := c.dialect.CheckServer(ctx, c.db); err != nil {
		return err
	}
	for _, r := range runners {
		if r.table == nil {
			continue // a jobs queue: checked below
		}
		if err := c.dialect.CheckTable(ctx, c.db, tableSchema(c.db, r.table), r.table.Name); err != nil {
			return fmt.Errorf("bunqueue: queue %q: %w", r.name, err)
		}
		if err := c.checkKey(ctx, r); err != nil {
			return err
		}
	}
	if jobs {
		for _, t := range []string{"bunqueue_jobs", "bunqueue_failed_jobs"} {
			if err := c.dialect.CheckTable(ctx, c.db, "", t); err != nil {
				return fmt.Errorf("bunqueue: the jobs tables are not ready (run bunqueue.Migrate, or apply bunqueue.MigrationSQL): %w", err)
			}
		}
	}
	if err := c.checkPlans(ctx, runners); err != nil {
		return err
	}
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.started = true
	c.watching.Store(c.newWatch(runners))
	for _, r := range runners {
		f := newFeed(r)
		c.workers.Add(1 + r.workers)
		go c.fill(workCtx, f)
		for range r.workers {
			go c.work(workCtx, r, f)
		}
	}
	if jobs && c.cfg.Retention > 0 {
		c.workers.Add(1)
		go c.clean(workCtx)
	}
	reg, err := c.tel.observeDepth(runners, c.cfg.Logger)
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "bunqueue: the queue depth gauge is off", "error", err)
	}
	c.depthReg = reg
	return nil
}

// unstarted returns ErrStopped or ErrStarted unless the client is new.
// Call with c.mu held.
func (c *Client) unstarted() error {
	switch {
	case c.stopped:
		return ErrStopped
	case c.started:
		return ErrStarted
	}
	return nil
}

// Stop stops claiming new rows and waits for the rows in flight to finish
// and commit. If ctx ends first, Stop cancels the handlers' contexts: their
// transactions roll back and their rows return to the queue. Stop then
// waits for the handlers to return (a handler that ignores its context
// delays it) and returns ctx's error. Stop may be called more than once.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.stopped {
		c.stopped = true
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	close(c.stopping)
	if c.depthReg != nil {
		_ = c.depthReg.Unregister()
	}
	c.mu.Unlock()

	done := make(chan struct{})
	go func() {
		c.workers.Wait()
		if c.stmts != nil {
			c.stmts.Close()
		}
		close(done)
	}()
	defer c.cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		c.cancel()
		<-done
		return fmt.Errorf("bunqueue: stop: in-flight rows were cancelled and returned to their queues: %w", ctx.Err())
	}
}

// runner is what a worker needs of a queue, whatever its row type.
type runner struct {
	name      string
	table     *schema.Table
	workers   int
	batch     int  // the most rows per transaction
	selfSized bool // batches grow and shrink by how long they take
	poll      time.Duration
	wake      chan struct{}
	// fetch reads on db, without locking, the keys of up to limit waiting
	// rows in the queue's order.
	fetch func(ctx context.Context, db bun.IDB, limit int) ([]candidate, error)
	// run claims those of keys that are still waiting and not locked (or,
	// with keys nil, up to limit rows at the head of the queue) and
	// processes them.
	run   func(ctx context.Context, s *session, limit int, keys []candidate) batchResult
	depth func(ctx context.Context, limit int) (int, error)
	// explain returns fetch's read without its LIMIT, and the queue's
	// table, for the plan check at Start.
	explain func() (*bun.SelectQuery, *schema.Table)
	// byPrimary, set by Start, tells run that the model's primary key is
	// the table's, so that claims may force the PRIMARY index.
	byPrimary *bool
}

// checkKey tells r whether its model's primary key is the table's own.
// If it is not, claims by key cannot use the PRIMARY index: Start warns,
// and they are left to the optimizer.
func (c *Client) checkKey(ctx context.Context, r *runner) error {
	if r.byPrimary == nil {
		return nil
	}
	cols, err := c.dialect.PrimaryKey(ctx, c.db, tableSchema(c.db, r.table), r.table.Name)
	if err != nil {
		return fmt.Errorf("bunqueue: queue %q: %w", r.name, err)
	}
	model := make([]string, len(r.table.PKs))
	for i, f := range r.table.PKs {
		model[i] = f.Name
	}
	same := len(cols) == len(model)
	for _, m := range model {
		same = same && slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, m) })
	}
	*r.byPrimary = same
	if !same {
		c.cfg.Logger.WarnContext(ctx, "bunqueue: the model's primary key is not the table's PRIMARY KEY; "+
			"claims lock rows by the model's key, which needs a unique index on it",
			"queue", r.name, "table", r.table.Name, "model_key", model, "primary_key", cols)
	}
	return nil
}

// work is one worker: it takes rows from the queue's feed and processes
// them, a batch per transaction, until the client stops.
func (c *Client) work(ctx context.Context, r *runner, f *feed) {
	defer c.workers.Done()
	ctx = workerContext(ctx, r) // its own writes do not wake its queue: see QueryHook
	log := c.cfg.Logger.With("queue", r.name)
	failures := 0
	size := r.batch
	if r.selfSized {
		size = 1
	}
	s := &session{db: c.db, dialect: c.dialect}
	defer s.end()
	for {
		select {
		case <-c.stopping:
			return
		default:
		}
		keys, filled := f.take(size)
		if keys == nil {
			// Keep the session's connection while work comes, not longer.
			var idle <-chan time.Time
			t := time.NewTimer(r.poll)
			if s.conn != nil {
				idle = t.C
			}
			select {
			case <-c.stopping:
				t.Stop()
				return
			case <-filled:
			case <-idle:
				s.end()
			}
			t.Stop()
			continue
		}
		began := time.Now()
		res := c.counts.running(r.name, len(keys), func() batchResult { return r.run(ctx, s, r.batch, keys) }) // in flight, for Stats
		if res.err != nil && ctx.Err() != nil {
			// Stop cancelled the batch. The driver may close the
			// connection lazily, and the server notice later: end the
			// server session now, so that the batch's locks are gone when
			// Stop returns.
			c.endSession(ctx, s)
		}
		s.failed(res.err)
		f.finish(keys, res)
		if r.selfSized && res.err == nil {
			size = resize(size, len(keys), time.Since(began), r.batch)
		}
		for _, err := range res.itemErrs {
			level := slog.LevelError
			if ie := (*ItemError)(nil); errors.As(err, &ie) && ie.Recorded && ie.Cooldown == 0 {
				level = slog.LevelWarn // OnError recorded it on the row
			}
			log.Log(ctx, level, "bunqueue: item failed", "error", err)
		}
		switch {
		case res.err != nil && ctx.Err() != nil:
			return
		case res.err != nil:
			failures++
			wait := backoff.Jitter(backoff.Exponential(failures, 100*time.Millisecond, max(r.poll, 5*time.Second)), 0.2)
			log.ErrorContext(ctx, "bunqueue: batch failed", "error", res.err, "retry_in", wait)
			t := time.NewTimer(wait)
			select {
			case <-c.stopping:
				t.Stop()
				return
			case <-t.C:
			}
		default:
			failures = 0
		}
	}
}

// resize returns the next size of a self-sized batch, after a batch of n
// rows (of size asked) took took: double a full batch that took less than
// half of BatchTarget, halve one that took longer than BatchTarget.
func resize(size, n int, took time.Duration, most int) int {
	switch {
	case took > BatchTarget:
		return max(size/2, 1)
	case n == size && took < BatchTarget/2:
		return min(size*2, most)
	}
	return size
}

// poke wakes the queue's feed if it is waiting for rows.
func (r *runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// tableSchema returns the schema named in the model's table tag, or "" for
// the connection's database.
func tableSchema(db *bun.DB, t *schema.Table) string {
	if t.Schema == db.Dialect().DefaultSchema() {
		return ""
	}
	return t.Schema
}

// endSession ends the server session of s, if it has one, from another
// connection.
func (c *Client) endSession(ctx context.Context, s *session) {
	if s.conn == nil || s.id == 0 {
		return
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := c.dialect.EndSession(ectx, c.db, s.id); err != nil {
		c.cfg.Logger.DebugContext(ctx, "bunqueue: end the session of a stopped worker", "session", s.id, "error", err)
	}
}
