package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
	"go.opentelemetry.io/otel/metric"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/idle"
	"github.com/bunqueue/bunqueue/internal/lease"
	"github.com/bunqueue/bunqueue/internal/prepared"
	"github.com/bunqueue/bunqueue/internal/procsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/internal/telemetry"
)

// Client runs the workers of its queues inside this process. Create it
// with NewClient, Add queues, Start it, and Stop it before the program
// exits.
type Client struct {
	db      *bun.DB
	claimDB *bun.DB // db with claim.RekeyHook, where claim transactions begin
	cfg     Config
	dialect sqldialect.Dialect
	tables  tables.Names // Config.Tables, checked
	tel     *telemetry.Telemetry

	packetMu sync.Mutex
	packet   int // max_allowed_packet, once read

	mu       sync.Mutex
	kinds    map[string]runJob // job workers by kind
	periodic []*periodicJob    // Config.PeriodicJobs, checked
	queues   []AnyQueue
	names    map[string]bool
	started  bool
	stopped  bool
	stopping chan struct{}      // closed by Stop: claim no more
	drained  chan struct{}      // closed once the workers Stop waits for have returned
	cancel   context.CancelFunc // cancels the handlers' contexts
	workers  sync.WaitGroup
	depthReg metric.Registration // the queue depth gauge's callback

	// stmts are the statements prepared for the workers; nil with
	// Config.NoPreparedStatements, or where the dialect prepares none.
	stmts *prepared.Cache
	// claims and leases are what the queues' claims and the lease-mode
	// queues need of the client (claim.Env, lease.Env).
	claims *claim.Env
	leases *lease.Env

	idle     *idle.Watcher          // the queues whose feeds wait for work, probed together
	watching atomic.Pointer[watch]  // set by Start: the runners QueryHook wakes, by table
	pauses   atomic.Pointer[pauses] // set by Start: the runners PauseQueue pauses, by name
	procMu   sync.Mutex
	proc     procsql.Row // the client's row of the process registry, once registered
	counts   counters    // what the workers did, for Stats
	histOff  atomic.Bool // the history table is missing (a schema before version 12)
	sig      signaling   // notifications between processes (listen.go)
	// jobFeeds, set by Start, are the feeds of the jobs queues, by name,
	// for handOver.
	jobFeeds atomic.Pointer[map[string]*engine.Feed]
}

// NewClient returns a Client that works through db, a bun DB opened with
// bun's mysqldialect (MySQL 8.0.1+ or MariaDB 10.6+), pgdialect
// (PostgreSQL 12+) or sqlitedialect (SQLite 3.35+); another dialect is an
// error. cfg may be nil for defaults.
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
	if err := checkListener(db, c); err != nil {
		return nil, err
	}
	names, err := c.Tables.names("Config.Tables", db.Dialect().Name())
	if err != nil {
		return nil, err
	}
	periodic, err := periodicJobs(c)
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c)
	if err != nil {
		return nil, err
	}
	client := &Client{db: db, claimDB: db.WithQueryHook(claim.RekeyHook{}), cfg: c, dialect: d, tables: names, tel: tel, names: map[string]bool{}, kinds: map[string]runJob{}, periodic: periodic,
		stopping: make(chan struct{}), drained: make(chan struct{})}
	if !c.NoPreparedStatements && d.Placeholder(1) != "" {
		client.stmts = prepared.New(db.DB, client.prepareFailed)
	}
	client.sig.Tables = names
	client.claims = client.claimEnv()
	client.leases = client.leaseEnv()
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

// Start checks the database and starts the workers of every queue, and
// the scheduler of Config.PeriodicJobs if it lists any. It refuses a
// server that does not skip locked rows (it proves this with two
// connections, using a two-row table named bunqueue_probe that it
// creates if missing; on SQLite, which has no row locks, it checks
// instead that the pool uses WAL, a busy_timeout and transactions begun
// IMMEDIATE), a queue whose table is missing or is a view (or, on MySQL
// and MariaDB, is not InnoDB), a queue whose query the server refuses
// (it runs each queue's claim once, with a condition no row meets, and
// returns the server's error), a connection pool too small for the
// workers, and a driver whose own prepared statements cannot work
// through the pool's connection pooler (pgx's default mode behind
// PgBouncer in transaction mode). It turns the workers' prepared
// statements off, with a warning, if the pool does not keep them (see
// Config.NoPreparedStatements). It explains each queue's query and logs
// a warning, naming an index that would serve it, if the plan scans or
// sorts (an error with Config.StrictQueryPlans). It warns when the
// database is a node of a multi-primary cluster, whose row locks are
// local to a node, and more strongly when the pool reaches several of
// its nodes (an error with Config.StrictClusterRouting). ctx bounds
// these checks only: the workers run until Stop.
func (c *Client) Start(ctx context.Context) (err error) {
	defer func() { err = c.dialect.Advise(err) }() // a driver that met a pooler: say what to do
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unstarted(); err != nil {
		return err
	}
	runners := c.runners()
	if err := c.check(ctx, runners); err != nil {
		return err
	}
	p, err := c.newPauses(ctx, runners)
	if err != nil {
		return err
	}
	c.pauses.Store(p)
	c.run(ctx, runners)
	return nil
}

// runsJobs reports whether job workers were added, so that the jobs
// queues run. Call with c.mu held.
func (c *Client) runsJobs() bool { return len(c.kinds) > 0 }

// runners returns the runners of the client's queues, in the order they
// were added, then of its jobs queues if it runs jobs.
func (c *Client) runners() []*runner {
	runners := make([]*runner, len(c.queues))
	for i, q := range c.queues {
		runners[i] = q.runner()
	}
	if c.runsJobs() {
		runners = append(runners, c.jobRunners()...)
	}
	return runners
}

// check runs Start's checks, in order: the pool's size, the server, the
// pooler, each queue's table, key and query, the jobs tables (with the
// periodic table for periodic jobs), the schema of the notification
// channel (with a Listener), the queues' plans and the job listings'.
func (c *Client) check(ctx context.Context, runners []*runner) error {
	if err := c.checkPool(runners); err != nil {
		return err
	}
	if err := c.checkServer(ctx); err != nil {
		return err
	}
	if err := c.checkPooler(ctx, runners); err != nil {
		return err
	}
	for _, r := range runners {
		if err := c.checkQueue(ctx, r); err != nil {
			return err
		}
		if err := r.slots.Ensure(ctx); err != nil {
			return err
		}
		if err := checkKeys(ctx, r.keys); err != nil {
			return err
		}
		if err := r.rate.Ensure(ctx); err != nil {
			return err
		}
		if err := checkKeys(ctx, r.keyRate); err != nil {
			return err
		}
	}
	if err := c.checkJobsTables(ctx); err != nil {
		return err
	}
	if err := c.prepareListening(ctx); err != nil {
		return err
	}
	if err := c.checkPlans(ctx, runners); err != nil {
		return err
	}
	return c.checkListPlans(ctx)
}

// checkPool refuses a connection pool too small for the runners. Each
// worker holds a connection while it has work, each queue's feed one for
// its reads while the queue has work, and the app's own statements need
// one more; the server's probe needs two.
func (c *Client) checkPool(runners []*runner) error {
	workers := 0
	for _, r := range runners {
		workers += r.Workers
	}
	most := c.db.Stats().MaxOpenConnections
	if need := max(workers+len(runners)+1, 2); most > 0 && most < need {
		return fmt.Errorf("bunqueue: the connection pool allows %d connections but the queues run %d workers; "+
			"each worker holds a connection while it has work, each of the %d queues one for its reads, and the app needs more: "+
			"raise SetMaxOpenConns to at least %d (or 0 for no limit)", most, workers, len(runners), need)
	}
	return nil
}

// checkQueue checks a table queue's table, its primary key and its
// query; a jobs queue's tables are checked by checkJobsTables.
func (c *Client) checkQueue(ctx context.Context, r *runner) error {
	if r.table == nil {
		return nil // a jobs queue in lease mode
	}
	schema, name := c.runnerTable(r)
	if err := c.dialect.CheckTable(ctx, c.db, schema, name); err != nil {
		return fmt.Errorf("bunqueue: queue %q: %w", r.Name, err)
	}
	if err := c.checkKey(ctx, r); err != nil {
		return err
	}
	if r.checkQuery == nil {
		return nil // a jobs queue in lock mode
	}
	if err := r.checkQuery(ctx); err != nil {
		// Whatever Config.StrictQueryPlans says: it would fail at every
		// read.
		return fmt.Errorf("bunqueue: queue %q: the server refuses its query: %w", r.Name, err)
	}
	return nil
}

// checkJobsTables checks, if the client runs jobs or enqueues periodic
// jobs, that the jobs tables exist, with the periodic table for the
// latter.
func (c *Client) checkJobsTables(ctx context.Context) error {
	names := []string{tables.Jobs, tables.FailedJobs}
	switch {
	case len(c.periodic) > 0:
		names = append(names, tables.Periodic)
	case !c.runsJobs():
		return nil
	}
	for _, t := range names {
		if err := c.dialect.CheckTable(ctx, c.db, c.tables.Schema(), c.tables.Bare(t)); err != nil {
			return fmt.Errorf("bunqueue: the jobs tables are not ready (run %s): %w", c.migrateHint(), err)
		}
	}
	if err := c.jobSQL().CheckColumns(ctx, c.db); err != nil {
		return fmt.Errorf("bunqueue: the jobs tables are of an older schema version (run %s): %w", c.migrateHint(), err)
	}
	return nil
}

// run starts the client: the idle watcher, each runner's feed and
// workers, the cleaner of completed jobs if it runs jobs, and the queue
// depth gauge. They run, with a context that only Stop cancels, until
// Stop.
func (c *Client) run(ctx context.Context, runners []*runner) {
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.started = true
	c.watching.Store(c.newWatch(runners))
	c.idle = c.newIdleWatch()
	c.workers.Add(1)
	go c.watchIdle(workCtx)
	c.startListening(workCtx, runners)
	jobFeeds := map[string]*engine.Feed{}
	defer c.jobFeeds.Store(&jobFeeds)
	env := c.engineEnv()
	for _, r := range runners {
		f := engine.NewFeed(&r.Queue)
		if r.jobs {
			jobFeeds[r.Name] = f
		}
		c.workers.Add(1 + r.Workers)
		go func() { defer c.workers.Done(); env.Fill(workCtx, f) }()
		for range r.Workers {
			go func() { defer c.workers.Done(); env.Work(workCtx, f) }()
		}
	}
	if c.runsJobs() { // completed jobs may be kept: for a Retention, or for their outputs
		c.workers.Add(1)
		go c.clean(workCtx)
	}
	if len(c.periodic) > 0 {
		c.workers.Add(1)
		go c.schedule(workCtx)
	}
	c.workers.Add(1)
	go c.heartbeat(workCtx)
	reg, err := c.tel.ObserveDepth(depthSources(runners), QueueDepthLimit, c.cfg.Logger)
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "bunqueue: the queue depth gauge is off", "error", err)
	}
	c.depthReg = reg
}

// claimEnv is what the queues' claims need of the client (see
// claim.Env).
func (c *Client) claimEnv() *claim.Env {
	return &claim.Env{
		DB: c.db, ClaimDB: c.claimDB, Dialect: c.dialect, Tel: c.tel, Logger: c.cfg.Logger,
		Retry: c.retry, CallApp: callApp, Contain: contain, Prepared: c.prepared, Finished: c.finishedBatch,
		ErrorType: errorType, StillQueued: ErrStillQueued,
		Report: func(ie *claim.ItemError) error {
			return &ItemError{Queue: ie.Queue, Key: ie.Key, Err: ie.Err, Recorded: ie.Recorded, Cooldown: ie.Cooldown}
		},
	}
}

// engineEnv is what the engine needs of the client (see engine.Env).
// Call it once the idle watcher is set.
func (c *Client) engineEnv() *engine.Env {
	return &engine.Env{
		DB: c.db, ClaimDB: c.claimDB, Dialect: c.dialect, Logger: c.cfg.Logger,
		Stopping: c.stopping, Idle: c.idle, BatchTarget: BatchTarget, Contain: contain,
		Running: c.counts.running, EndSession: c.endSession, LogItemError: c.logItemError,
	}
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

// Stop stops claiming new rows and enqueueing periodic jobs, and waits
// for the rows in flight (and a transaction that enqueues ticks) to
// finish and commit. If ctx ends first, Stop cancels the handlers'
// contexts: their transactions roll back and their rows return to the
// queue. Stop then waits for the handlers to return (a handler that
// ignores its context delays it) and returns ctx's error. A handler cut
// short in a statement loses its connection: in a queue with a Timeout,
// Stop ends its server session, which releases its rows before Stop
// returns; in one without, the server releases them once it notices (at
// once, or when the statement ends).
//
// Stop may be called more than once, and from several goroutines at
// once: every call waits for the same drain, returning nil once it is
// over or, if its own ctx ends first, cancelling the handlers as above
// and returning ctx's error once they have returned.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.stopped = true
		c.mu.Unlock()
		return nil
	}
	if !c.stopped {
		c.stopped = true
		close(c.stopping)
		if c.depthReg != nil {
			_ = c.depthReg.Unregister()
		}
		go c.drain()
	}
	c.mu.Unlock()

	select {
	case <-c.drained:
		return nil
	default:
	}
	select {
	case <-c.drained:
		return nil
	case <-ctx.Done():
		c.cancel()
		<-c.drained
		return fmt.Errorf("bunqueue: stop: in-flight rows were cancelled and returned to their queues: %w", ctx.Err())
	}
}

// drain waits for the workers to return once Stop has told them to, then
// closes the prepared statements, releases the handlers' contexts and
// closes c.drained.
func (c *Client) drain() {
	c.workers.Wait()
	c.unregister()
	if c.stmts != nil {
		c.stmts.Close()
	}
	c.cancel()
	close(c.drained)
}

// checkKey tells r whether its model's primary key is the table's own.
// If it is not, claims by key cannot use the PRIMARY index: Start warns,
// and they are left to the optimizer.
func (c *Client) checkKey(ctx context.Context, r *runner) error {
	if r.byPrimary == nil {
		return nil
	}
	schema, name := c.runnerTable(r)
	cols, err := c.dialect.PrimaryKey(ctx, c.db, schema, name)
	if err != nil {
		return fmt.Errorf("bunqueue: queue %q: %w", r.Name, err)
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
			"queue", r.Name, "table", name, "model_key", model, "primary_key", cols)
	}
	return nil
}

// runnerTable returns the schema ("" for the connection's) and the name
// of r's table, as the catalogs list them: the model's, or for a jobs
// queue the client's jobs table, whatever its model's tag says.
func (c *Client) runnerTable(r *runner) (schema, name string) {
	if r.jobs {
		return c.tables.Schema(), c.tables.Bare(tables.Jobs)
	}
	return tableSchema(c.db, r.table), r.table.Name
}

// tableSchema returns the schema named in the model's table tag, or "" for
// the connection's database.
func tableSchema(db *bun.DB, t *schema.Table) string {
	if t.Schema == db.Dialect().DefaultSchema() {
		return ""
	}
	return t.Schema
}

// endSession ends the server session of s's last transaction, if it was
// read (queues with a Timeout) and still runs that transaction, from
// another connection.
func (c *Client) endSession(ctx context.Context, s *claimconn.Session) {
	id := s.TxSession()
	if !id.Known() {
		return
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	if err := c.dialect.EndTxSession(ectx, c.db, id); err != nil {
		c.cfg.Logger.DebugContext(ctx, "bunqueue: end the session of a stopped worker", "session", id.ID, "error", err)
	}
}
