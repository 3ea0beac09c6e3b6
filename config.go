package bunqueue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// Defaults used where a Config or QueueConfig field is left zero.
const (
	// WorkersDefault is the number of worker goroutines per queue. Each
	// holds a database connection while it has work.
	WorkersDefault = 4
	// BatchSizeDefault is the most rows one transaction claims when
	// BatchSize is left zero. Such a queue sizes its batches itself: each
	// worker starts with one row per transaction, doubles its batch while
	// the batch's handlers take less than BatchTarget/2 in all, and
	// shrinks it to fit when they take longer than BatchTarget. Fast
	// handlers get large batches under a backlog; slow ones run one per
	// transaction. Round trips and commits are not counted: a database
	// that is far away or slow to commit gets batches as large as a near
	// one.
	BatchSizeDefault = 50
	// BatchTarget is how long the handlers of a self-sized batch
	// (BatchSize left zero) should run in all, one after the other, while
	// the batch holds its rows.
	BatchTarget = 50 * time.Millisecond
	// PollIntervalDefault is how long an idle worker waits before it looks
	// for work again. Each wait is drawn from [¾·PollInterval, PollInterval].
	PollIntervalDefault = time.Second
	// CooldownDefault is how long this process leaves a row alone after it
	// failed without its failure being recorded on the row (OnError nil or
	// failing, or a handler that did not take the row out of the queue).
	// The wait doubles on each further failure, up to CooldownMax.
	CooldownDefault = time.Second
	// CooldownMax caps the doubling cooldown of a failing row, unless
	// QueueConfig.Cooldown is longer.
	CooldownMax = 10 * time.Minute
	// CooldownLimit is how many rows one queue keeps cooling down; past it,
	// the row whose wait ends first is dropped from the list.
	CooldownLimit = 1000

	// QueueDefault is the jobs queue used when EnqueueOpts.Queue is empty,
	// and the only one when Config.JobQueues is nil.
	QueueDefault = "default"
	// MaxAttemptsDefault is how many attempts a job gets when
	// EnqueueOpts.MaxAttempts is zero.
	MaxAttemptsDefault = 25
	// LeaseDefault is how long a lease-mode claim holds a job before
	// another worker may take it, unless heartbeats extend it.
	LeaseDefault = 5 * time.Minute
	// OutputRetentionDefault is how long, at least, a completed job that
	// recorded an output (RecordOutput) is kept, so that JobGet can read
	// the output, when OutputRetention is left zero.
	OutputRetentionDefault = 24 * time.Hour
	// BackoffBase, BackoffMax and BackoffJitter shape DefaultBackoff.
	BackoffBase   = time.Second
	BackoffMax    = time.Hour
	BackoffJitter = 0.2
)

// BackoffFunc returns how long a job waits before its next attempt after
// its attempt-th failure (attempt is 1 after the first failure).
type BackoffFunc func(attempt int) time.Duration

// DefaultBackoff is BackoffBase·2^(attempt−1), capped at BackoffMax, with
// ±BackoffJitter jitter: about 1 s, 2 s, 4 s … up to an hour.
func DefaultBackoff(attempt int) time.Duration {
	return backoff.Jitter(backoff.Exponential(attempt, BackoffBase, BackoffMax), BackoffJitter)
}

// JobQueueConfig configures one queue of the jobs table. Its zero value
// means defaults.
type JobQueueConfig struct {
	// Workers is the number of goroutines running this queue's jobs in
	// this process. Defaults to WorkersDefault.
	Workers int
	// BatchSize is the most jobs one claim takes. In lock mode they run in
	// one transaction, each in its own savepoint; in lease mode they are
	// leased together and run one after the other. Zero (the default)
	// sizes batches by how long they take, up to BatchSizeDefault: see
	// BatchTarget.
	BatchSize int
	// Mode is ModeLock (the default) or ModeLease.
	Mode JobMode
	// Lease is how long a lease-mode claim holds a job. A worker extends
	// it every Lease/3 while the job runs, and cancels the job's context
	// if it could not extend it before it ends, so that a job never runs
	// on after another worker may have taken it. Defaults to LeaseDefault.
	// Ignored in lock mode.
	Lease time.Duration
	// Timeout bounds one attempt of a job: its context is cancelled after
	// Timeout, and the attempt fails. In lock mode, a statement cut short
	// by the cancellation takes the claim transaction down: the session
	// is ended (KILL) and the failed attempt recorded in a transaction of
	// its own (see QueueConfig.Timeout, and its cost). In lease mode it
	// must be below Lease. Zero means no timeout.
	Timeout time.Duration
	// PollInterval is how long an idle worker waits before it looks again.
	// Defaults to Config.PollInterval.
	PollInterval time.Duration
	// Hooks are lifecycle hooks called around every job of this queue,
	// after the client's.
	Hooks []Hook

	// GlobalLimit, if not zero, is the most jobs of this queue that run
	// at once across every process that runs it: see
	// QueueConfig.GlobalLimit. In lease mode a worker's slot is leased
	// with its jobs and, if its process dies, free again when the lease
	// runs out.
	GlobalLimit int

	// KeyLimit, if not zero, is the most jobs of this queue that run at
	// once across every process per EnqueueOpts.LimitKey (jobs without
	// one are not limited): see QueueConfig.KeyLimit. In lease mode a
	// batch leases one slot per key among its jobs with them, until the
	// batch ends.
	KeyLimit int

	// RateLimit, if not zero, is the most jobs of this queue that start
	// in any period of its Per across every process: see
	// QueueConfig.RateLimit. In lease mode a job's slot is taken in its
	// lease's transaction.
	RateLimit Rate

	// KeyRate, if not zero, is the most jobs of this queue that start in
	// any period of its Per across every process per EnqueueOpts.LimitKey
	// (jobs without one are not limited): see QueueConfig.KeyRate.
	KeyRate Rate

	// Retention keeps this queue's completed jobs in the jobs table for
	// this long after they completed; then the cleaner of a client that
	// runs the queue deletes them (see Config.Retention). Zero means
	// Config.Retention; where that is zero too, a job is deleted as it
	// completes, in its worker's transaction, unless it recorded an
	// output (see OutputRetention). Processes that run the queue should
	// agree on it: the cleaner of each deletes by its own.
	Retention time.Duration

	// OutputRetention keeps a completed job of this queue that recorded
	// an output (RecordOutput) for at least this long after it completed,
	// whatever Retention says, so that JobGet can read the output.
	// Defaults to Config.OutputRetention.
	OutputRetention time.Duration

	// LogLevel, if not nil, is the lowest level of the lines that the
	// workers log about this queue's failed attempts (see Config.Logger):
	// slog.LevelWarn drops the snoozes and the releases on Stop (INFO),
	// slog.LevelError the retries (WARN) too. A *slog.LevelVar changes it
	// while the queue runs. Config.Logger's handler still filters the
	// lines that pass. Nil (the default) passes every line.
	LogLevel slog.Leveler

	selfSized bool // BatchSize was left zero
}

// Config configures a Client. A nil *Config, and its zero value, mean
// defaults.
type Config struct {
	// Tables names bunqueue's own tables (the jobs, failed jobs, paused
	// queues, periodic ticks and limit slots): by default bunqueue_jobs
	// and the others, in the connection's database. Clients with
	// different Tables in one database never see each other's jobs (see
	// Tables).
	Tables Tables

	// Logger receives what workers cannot return to a caller: handler
	// errors, rows that did not leave their queue, lost connections. A
	// row's failure is an INFO line when OnError recorded it, an ERROR
	// when it did not. A job's failed attempt is a line with its queue,
	// job_id, kind, attempt, max_attempts and outcome: a WARN with
	// retry_in when it will be retried, an ERROR when it failed for good.
	// A queue's LogLevel (QueueConfig, JobQueueConfig) drops its lines
	// below a level. Defaults to slog.Default().
	Logger *slog.Logger

	// PollInterval is used by queues whose QueueConfig.PollInterval is
	// zero. Defaults to PollIntervalDefault.
	PollInterval time.Duration

	// ProcessName names this process in the process registry
	// (Client.Processes, the dashboard, `bunqueue processes`). Defaults
	// to "host:pid".
	ProcessName string
	// HeartbeatInterval is how often the started client refreshes its
	// row of the process registry: one statement. The others show it as
	// stale once it has missed ProcessStaleBeats of them. Defaults to
	// HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration

	// JobQueues configures the queues of the jobs table, by name. Enqueue
	// refuses a queue that is not listed. Defaults to one queue named
	// QueueDefault with default settings. Their workers run only if at
	// least one worker was added with AddWorker.
	JobQueues map[string]JobQueueConfig

	// PeriodicJobs are the jobs this client enqueues on a schedule, while
	// it runs (see PeriodicJob). Every process that lists a schedule
	// keeps it: each tick is enqueued once, whichever of them comes first.
	// NewClient refuses an invalid one, naming its field. They need the
	// jobs tables of schema version 5 (Migrate), but no worker in this
	// process: the jobs may run elsewhere.
	PeriodicJobs []PeriodicJob

	// Backoff computes the wait before a failed job's next attempt.
	// Defaults to DefaultBackoff.
	Backoff BackoffFunc

	// TracerProvider makes the spans: a PRODUCER span "send {queue}" per
	// Enqueue, a CONSUMER span "process {queue}" per claimed batch or item.
	// Defaults to otel.GetTracerProvider() at NewClient.
	TracerProvider trace.TracerProvider

	// MeterProvider makes the metrics. Defaults to otel.GetMeterProvider()
	// at NewClient.
	MeterProvider metric.MeterProvider

	// Propagators carry a job's creation context from Enqueue to its
	// processing (stored with the job). Defaults to
	// otel.GetTextMapPropagator() at NewClient; when that propagates
	// nothing, W3C trace context.
	Propagators propagation.TextMapPropagator

	// ParentProcessSpans makes an item's process span a child of the
	// context that created the item (the send span of Enqueue, or the
	// traceparent in QueueConfig.TraceColumn) instead of the default: the
	// root of a new trace, with a link to that context.
	ParentProcessSpans bool

	// Hooks are lifecycle hooks called around every item of every queue of
	// this client, jobs queues included, before the queues' own.
	Hooks []Hook

	// Retention keeps completed jobs in the jobs table for this long, in
	// the jobs queues whose JobQueueConfig.Retention is zero. A client
	// that runs jobs (a worker was added with AddWorker) has a cleaner
	// that deletes, in batches by primary key, the completed jobs of the
	// queues of its JobQueues once they are older than their queue's
	// retention; it leaves the completed jobs of other queues alone, for
	// the clients that run them. Zero (the default) deletes a job as it
	// completes, in its worker's transaction, unless it recorded an
	// output (see OutputRetention).
	Retention time.Duration

	// OutputRetention keeps a completed job that recorded an output
	// (RecordOutput) for at least this long after it completed, whatever
	// Retention says, so that JobGet can read the output, in the jobs
	// queues whose JobQueueConfig.OutputRetention is zero. Defaults to
	// OutputRetentionDefault.
	OutputRetention time.Duration

	// NoPreparedStatements makes the workers run every statement in text,
	// as bun formats it. By default a worker's claim of one row by its
	// key, the re-check that the row left its queue, and a lone lock-mode
	// job's DELETE run as statements prepared on the server (once per
	// connection) with the key as an argument, which costs the server less
	// than a new text each time; bun's query hooks do not see them, and
	// bunqueue makes their spans. Start proves whether the pool keeps
	// them (a connection pooler in transaction mode, such as PgBouncer
	// before 1.21 or without max_prepared_statements, does not) and turns
	// them off, with a warning, if it does not; so does the first
	// statement found missing on its server session. Set it to skip that,
	// where a pooler is known not to keep them.
	NoPreparedStatements bool

	// StrictQueryPlans makes Start fail, instead of logging a warning,
	// when the plan of a queue's query scans or sorts (a full table scan,
	// a full index scan that filters, a filesort), or cannot be
	// explained; and, for a client that runs jobs, when a statement of
	// JobList is not served by its index of schema version 4 (see
	// docs/jobs.md). Defaults to false: warn and start.
	StrictQueryPlans bool

	// StrictClusterRouting makes Start fail, instead of logging a warning,
	// when the connections of the pool reach more than one node of a
	// multi-primary cluster (Galera, MySQL Group Replication in
	// multi-primary mode) or more than one server: row locks are local to
	// a node, so workers on two nodes can run one row at the same time.
	// Start then also fails if it cannot read which servers the pool
	// reaches. A pool that reaches one node of such a cluster starts with
	// a warning either way, as other processes may reach other nodes: see
	// docs/galera.md. Defaults to false: warn and start.
	StrictClusterRouting bool

	// Listener, on PostgreSQL, receives the notifications that Enqueue
	// and Notify send from any process, so that this client's workers
	// start other processes' jobs at once instead of at their next poll
	// (see docs/notify.md). Set it with the pgxlisten module, which
	// listens on a pgx connection of its own. While it is not listening
	// (a lost connection, retried with backoff) workers poll as without
	// it; polling goes on at PollInterval either way, for what no
	// notification announces: jobs scheduled for later, retries, rows
	// the app writes without Notify. NewClient refuses it on MySQL,
	// MariaDB and SQLite, which have no notifications. Defaults to nil:
	// no listening.
	Listener Listener

	// NoEnqueueNotify stops Enqueue and EnqueueMany from notifying, on
	// PostgreSQL, the listening clients of every process: by default each
	// call that inserts a job due now runs SELECT pg_notify(…) through
	// the same db, delivered when its transaction commits. Set it where no
	// process listens, to save that statement (its cost is in
	// docs/notify.md). Notify is not affected. Ignored on MySQL, MariaDB
	// and SQLite, which never notify.
	NoEnqueueNotify bool
}

// QueueConfig configures a Queue. A nil *QueueConfig, and its zero value,
// mean defaults.
type QueueConfig[T any] struct {
	// Workers is the number of goroutines that claim and process rows of
	// this queue in this process. Each holds one database connection while
	// it processes a batch. Defaults to WorkersDefault.
	Workers int

	// BatchSize is the most rows one transaction locks and processes. With
	// more than one (or with OnError set), each row runs in its own
	// SAVEPOINT, taken before the first statement its handler runs through
	// tx, so a failing row does not undo the others, and the batch commits
	// once. Zero (the default) sizes batches by how long they
	// take, up to BatchSizeDefault: see BatchTarget. When fewer rows wait
	// than the workers could take, they are shared out, not taken by the
	// first worker.
	BatchSize int

	// PollInterval is how long an idle worker waits before it looks again.
	// Defaults to Config.PollInterval, then PollIntervalDefault.
	PollInterval time.Duration

	// Cooldown is the first wait of a row that failed without leaving the
	// queue; it doubles on each failure up to CooldownMax (or Cooldown
	// itself, if longer), ±10% jitter. Defaults to
	// CooldownDefault.
	Cooldown time.Duration

	// Timeout bounds one call of the handler (with the queue's hooks):
	// its context is cancelled after Timeout, and a call that then fails
	// is the row's failure, as any other. A statement cut short by the
	// cancellation takes its transaction down with its connection; the
	// server session is then ended (KILL, pg_terminate_backend), if it
	// still runs that transaction, which releases the batch's rows, and
	// the failure is recorded through OnError in a transaction of its
	// own. To know that session, even through a pooler in transaction
	// mode, a worker reads it in each transaction, one round trip more
	// per transaction; on PostgreSQL, Start refuses a Timeout where
	// track_activities is off. Stop ends those sessions too. A handler
	// that returns nil after its Timeout has succeeded, unless a
	// statement the timeout cut short (an error it swallowed) lost its
	// transaction: then it failed as above. A batch handler's call is
	// bounded as a whole. Zero (the default) means no timeout. A handler
	// that ignores its context is not stopped: it holds its worker and
	// its rows until it returns.
	Timeout time.Duration

	// Hooks are lifecycle hooks called around every item of this queue,
	// after the client's.
	Hooks []Hook

	// GlobalLimit, if not zero, is the most handlers of this queue that
	// run at once across every process that runs it (a batch's handlers
	// run one after the other; a batch handler's call is one). A worker
	// runs a transaction only while it holds one of the queue's
	// GlobalLimit slots, rows of the bunqueue_slots table (Migrate creates
	// it, also for table queues), which it locks in the transaction with
	// SKIP LOCKED: the slot is free again when the transaction ends, or
	// when the server ends the session of a process that died. A worker
	// that finds every slot held waits about 25ms and looks again. A
	// process runs at most GlobalLimit workers of the queue. Processes
	// that run the queue should agree on the limit: each one honours its
	// own. Zero (the default) means no limit, and no statement on the
	// slots table.
	GlobalLimit int

	// KeyLimit, with KeyColumn, is the most handlers of this queue that
	// run at once across every process per value of the column KeyColumn
	// of its rows: one order per customer at a time is KeyColumn
	// "customer_id", KeyLimit 1. Rows whose key is NULL are not limited.
	// A claim locks its rows, then one slot per key among them, rows of
	// the bunqueue_slots table (Migrate), with SKIP LOCKED; a row whose
	// key has no free slot is left out of the batch and waits, unrun,
	// while its key is full; this process's reads leave out the keys it
	// found full for a moment, so that they do not hold up the other
	// keys' rows. A self-sized batch that left rows out halves the
	// worker's next one: a key's slot is held until its batch commits.
	// Slots are freed as GlobalLimit's are. Zero (the default) means
	// none.
	KeyLimit int
	// KeyColumn names the column of the model whose value is a row's key
	// for KeyLimit and KeyRate.
	KeyColumn string

	// RateLimit, if not zero, is the most handlers of this queue that
	// start in any period of length Per across every process that runs
	// it: Rate{N: 20, Per: time.Second} starts at most 20 rows in any
	// second, with no burst beyond. Every start counts, whether its
	// handler succeeds or fails. It is kept as N rows of the
	// bunqueue_slots table (Migrate creates it), each held for Per from
	// the start it served, taken with SKIP LOCKED in a short transaction
	// of their own before the claim (on SQLite, in the claim's), which
	// claims no more rows than it got; a worker that finds none free waits until the first one is
	// free again (at most the poll interval). Processes that run the
	// queue should agree on it: each one honours its own. Zero (the
	// default) means no limit, and no statement on the slots table.
	// See docs/control.md.
	RateLimit Rate

	// KeyRate, with KeyColumn, is the most handlers of this queue that
	// start in any period of length Per per value of the column KeyColumn
	// of its rows, across every process: at most 5 emails a second per
	// domain. Rows whose key is NULL are not limited. The claim takes the
	// slots of the keys among its rows, after it read them, and leaves
	// out of the batch the rows whose key has none (they wait, unrun,
	// while it is used up, as KeyLimit's do). Zero (the default) means
	// none.
	KeyRate Rate

	// TraceColumn names a column of the table that holds a W3C
	// traceparent (fill it with TraceParent(ctx) when the app inserts the
	// row), so that the row's process span links to the request that made
	// it. Empty means none.
	TraceColumn string

	// LogLevel, if not nil, is the lowest level of the lines that the
	// workers log about this queue's failed rows (see Config.Logger):
	// slog.LevelWarn drops the failures that OnError recorded (INFO) and
	// keeps those it did not (ERROR). A *slog.LevelVar changes it while
	// the queue runs. Config.Logger's handler still filters the lines
	// that pass. Nil (the default) passes every line.
	LogLevel slog.Leveler

	// OnError is called when the handler returns an error or panics, after
	// the handler's writes were undone and while the row is still locked,
	// with the row as it was claimed. Record the failure on the row through
	// tx (an attempts count, a retry_at in the future, a failed status) so
	// that it leaves the query for a while; those writes commit with the
	// batch. If OnError is nil or returns an error, its writes are undone
	// too, the row stays in the queue, and this process cools it down.
	OnError func(ctx context.Context, tx bun.Tx, item *T, err error) error

	selfSized bool // BatchSize was left zero
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	orDefault(&out.PollInterval, PollIntervalDefault)
	orDefault(&out.HeartbeatInterval, HeartbeatIntervalDefault)
	orDefault(&out.OutputRetention, OutputRetentionDefault)
	if out.Backoff == nil {
		out.Backoff = DefaultBackoff
	}
	queues := map[string]JobQueueConfig{}
	for name, q := range out.JobQueues {
		queues[name] = q.withDefaults(out)
	}
	if out.JobQueues == nil {
		queues[QueueDefault] = JobQueueConfig{}.withDefaults(out)
	}
	out.JobQueues = queues
	return out
}

func (q JobQueueConfig) withDefaults(c Config) JobQueueConfig {
	orDefault(&q.Workers, WorkersDefault)
	q.selfSized = q.selfSized || q.BatchSize == 0
	orDefault(&q.BatchSize, BatchSizeDefault)
	orDefault(&q.Lease, LeaseDefault)
	orDefault(&q.PollInterval, c.PollInterval)
	orDefault(&q.Retention, c.Retention)
	orDefault(&q.OutputRetention, c.OutputRetention)
	return q
}

// orDefault sets *v to d if *v is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

func (c Config) validate() error {
	switch {
	case c.PollInterval < 0:
		return fmt.Errorf("bunqueue: Config.PollInterval must not be negative, got %s", c.PollInterval)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("bunqueue: Config.HeartbeatInterval must not be negative, got %s", c.HeartbeatInterval)
	case c.Retention < 0:
		return fmt.Errorf("bunqueue: Config.Retention must not be negative, got %s", c.Retention)
	case c.OutputRetention < 0:
		return fmt.Errorf("bunqueue: Config.OutputRetention must not be negative, got %s", c.OutputRetention)
	case len(c.ProcessName) > 255:
		return fmt.Errorf("bunqueue: Config.ProcessName must be at most 255 bytes, got %d", len(c.ProcessName))
	}
	if err := checkText("Config.ProcessName", c.ProcessName); err != nil {
		return fmt.Errorf("bunqueue: %w", err)
	}
	for name, q := range c.JobQueues {
		if err := checkText("Config.JobQueues: a queue name", name); err != nil {
			return fmt.Errorf("bunqueue: %w", err)
		}
		field := func(f string, v any) error {
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].%s must not be negative, got %v", name, f, v)
		}
		switch {
		case name == "" || len(name) > 128:
			return fmt.Errorf("bunqueue: Config.JobQueues: a queue name must have 1 to 128 bytes, got %q", name)
		case q.Workers < 0:
			return field("Workers", q.Workers)
		case q.BatchSize < 0:
			return field("BatchSize", q.BatchSize)
		case q.Lease < 0:
			return field("Lease", q.Lease)
		case q.Timeout < 0:
			return field("Timeout", q.Timeout)
		case q.PollInterval < 0:
			return field("PollInterval", q.PollInterval)
		case q.GlobalLimit < 0:
			return field("GlobalLimit", q.GlobalLimit)
		case q.KeyLimit < 0:
			return field("KeyLimit", q.KeyLimit)
		case q.Retention < 0:
			return field("Retention", q.Retention)
		case q.OutputRetention < 0:
			return field("OutputRetention", q.OutputRetention)
		case q.RateLimit.check() != nil:
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].RateLimit: %w", name, q.RateLimit.check())
		case q.KeyRate.check() != nil:
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].KeyRate: %w", name, q.KeyRate.check())
		case q.Mode != ModeLock && q.Mode != ModeLease:
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].Mode must be ModeLock or ModeLease, got %d", name, int(q.Mode))
		case q.Mode == ModeLease && q.Lease < time.Second:
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].Lease must be at least 1s, got %s", name, q.Lease)
		case q.Mode == ModeLease && q.Timeout >= q.Lease:
			return fmt.Errorf("bunqueue: Config.JobQueues[%q].Timeout (%s) must be below the Lease", name, q.Timeout)
		}
	}
	return nil
}

func (c *QueueConfig[T]) withDefaults(client Config) QueueConfig[T] {
	var out QueueConfig[T]
	if c != nil {
		out = *c
	}
	orDefault(&out.Workers, WorkersDefault)
	out.selfSized = out.BatchSize == 0
	orDefault(&out.BatchSize, BatchSizeDefault)
	orDefault(&out.PollInterval, client.PollInterval)
	orDefault(&out.Cooldown, CooldownDefault)
	return out
}

func (c *QueueConfig[T]) validate(queue string) error {
	if c == nil {
		return nil
	}
	field := func(name string, v any) error {
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.%s must not be negative, got %v", queue, name, v)
	}
	switch {
	case c.Workers < 0:
		return field("Workers", c.Workers)
	case c.BatchSize < 0:
		return field("BatchSize", c.BatchSize)
	case c.PollInterval < 0:
		return field("PollInterval", c.PollInterval)
	case c.Cooldown < 0:
		return field("Cooldown", c.Cooldown)
	case c.Timeout < 0:
		return field("Timeout", c.Timeout)
	case c.GlobalLimit < 0:
		return field("GlobalLimit", c.GlobalLimit)
	case c.KeyLimit < 0:
		return field("KeyLimit", c.KeyLimit)
	case c.RateLimit.check() != nil:
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.RateLimit: %w", queue, c.RateLimit.check())
	case c.KeyRate.check() != nil:
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyRate: %w", queue, c.KeyRate.check())
	}
	return nil
}

func (c *QueueConfig[T]) traceColumn() string {
	if c == nil {
		return ""
	}
	return c.TraceColumn
}

func (c *QueueConfig[T]) hooks() []Hook {
	if c == nil {
		return nil
	}
	return c.Hooks
}
