// Package engine runs the queues of a client in this process: for each
// queue, a feed that reads the keys of its waiting rows with a plain read
// that locks nothing, and the workers that take them from the feed and
// claim and process them, a batch per transaction, through the queue's
// Work (the claim pipeline of a table or jobs queue in lock mode, or the
// leases of a jobs queue in lease mode). It knows nothing of the row
// types: a Work does.
package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/idle"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Work is the work of a queue, in the three kinds of queue: a table
// queue (its rows are claimed and processed in one transaction: lock
// mode), a jobs queue in lock mode, and a jobs queue in lease mode (a
// short transaction leases the jobs, which run outside it).
type Work interface {
	// Fetch reads on db, without locking, the keys of up to limit
	// waiting rows in the queue's order.
	Fetch(ctx context.Context, db bun.IDB, limit int) ([]Key, error)
	// Probe returns Fetch's read of one row as a scalar subquery (1, or
	// NULL if there is none), leaving out the rows of except, for the
	// idle watcher.
	Probe(db bun.IDB, except []Key) *bun.SelectQuery
	// RunBatch claims those of keys that are still waiting and not
	// locked (or, with keys nil, up to limit rows at the head of the
	// queue) and processes them, on the worker's session s.
	RunBatch(ctx context.Context, s *claimconn.Session, limit int, keys []Key) Result
	// Depth counts the waiting rows, up to limit.
	Depth(ctx context.Context, limit int) (int, error)
	// Explain returns Fetch's read without its LIMIT, and the queue's
	// table, for the plan check at Start.
	Explain() (*bun.SelectQuery, *schema.Table)
}

// Queue is one queue as the engine runs it: its name, its settings and
// its Work. The workers, the feed, the idle watcher and the client's
// wake-ups share it.
type Queue struct {
	Name string
	Settings
	// Wake is poked (see Poke) when a statement may have put rows in the
	// queue: the feed reads again.
	Wake chan struct{}
	// Gate is whether the queue is paused; NewFeed sets one if it is nil.
	Gate *Gate
	// PerKey is the queue's KeyLimit (slots per key), 0 without one: the
	// feed keeps a key's rows in one batch (see Feed.take).
	PerKey int
	Work
}

// Settings are the settings of a queue that the engine acts on (how many
// workers, how large their batches, how often an idle queue is read),
// with defaults applied.
type Settings struct {
	Workers   int
	Batch     int           // the most rows per transaction
	SelfSized bool          // batches grow and shrink by how long they take
	Poll      time.Duration // how long an idle queue waits before it looks again
	Timeout   time.Duration // the handlers' Timeout, if any
}

// Poke wakes the queue's feed if it is waiting for rows.
func (q *Queue) Poke() {
	select {
	case q.Wake <- struct{}{}:
	default:
	}
}

// Key is the primary key of a row that a plain read (the feed's)
// found waiting: the key that a claim locks the row by.
type Key struct {
	ID   string // readable and unique: "id=7", or "a=1,b=2"
	Vals []any  // the key's values, in primary key order
	// LimitKey is the row's key of its queue's KeyLimit (its slot key),
	// "" for a row without one or a queue without a KeyLimit.
	LimitKey string
}

// Result is what one claim transaction did.
type Result struct {
	Claimed  int      // rows locked by the claim
	Got      []string // the ids of the rows locked by the claim
	Done     int      // rows processed and committed
	ItemErrs []error  // one error per failed row
	Err      error    // what kept the batch from committing
	// Completed are the ids of the Done rows (lock mode; a lease-mode
	// batch counts each job as it completes, see lease.Env.Finished).
	Completed []string
	// OneByOne are rows to claim again one per transaction: the batch
	// handler's call timed out and took the transaction down with it.
	OneByOne []Key
	// Untried are the ids of rows the batch was given but did not try to
	// claim: its RateLimit had no slots for them. They are not held.
	Untried []string
	// Work is how long the batch's handlers (and OnError) ran, one after
	// the other, while its rows were held: what sizes its next batch
	// (see batchsize).
	Work time.Duration
	// LeftOut is how many claimed rows the batch left out because their
	// key had no free slot (KeyLimit, KeyRate): keys are contended.
	LeftOut int
}

// Env is what the engine needs of the client that runs it.
type Env struct {
	DB      *bun.DB // the feeds' reads
	ClaimDB *bun.DB // where the workers' claim transactions begin
	Dialect sqldialect.Dialect
	Logger  *slog.Logger
	// Stopping is closed when the client stops: claim no more.
	Stopping <-chan struct{}
	// Idle probes the queues whose feeds found nothing new.
	Idle *idle.Watcher
	// BatchTarget is how long the handlers of a self-sized batch should
	// take (see batchsize).
	BatchTarget time.Duration
	// Contain runs the app's code (a queue's query function) so that a
	// panic there fails the call, not the goroutine.
	Contain func(ctx context.Context, fn func() error) error
	// Running runs a batch of n rows of queue, counting them in flight.
	Running func(queue string, n int, run func() Result) Result
	// EndSession ends the server session of s's last transaction, which
	// Stop cancelled, so that its locks are gone when Stop returns.
	EndSession func(ctx context.Context, s *claimconn.Session)
	// LogItemError logs the failure of one row.
	LogItemError func(ctx context.Context, log *slog.Logger, err error)
}

// workerKey marks the context of a worker: the value is its queue.
type workerKey struct{}

// workerContext marks ctx as the context of a worker of q (see
// WorkerOf).
func workerContext(ctx context.Context, q *Queue) context.Context {
	return context.WithValue(ctx, workerKey{}, q)
}

// WorkerOf returns the queue whose worker's context ctx is (its
// handlers', and the library's own statements'), or nil: the client's
// wake-up hook does not wake a queue for its own workers' writes.
func WorkerOf(ctx context.Context) *Queue {
	q, _ := ctx.Value(workerKey{}).(*Queue)
	return q
}
