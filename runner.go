package bunqueue

import (
	"context"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// The engine's shared types: what the client's workers, feeds and checks
// need of a queue, whatever its kind and row type. A queue is a runner:
// its name, its settings and its engine, which does the work.

// queueEngine is the work of a queue, in the three kinds of queue:
//   - *Queue[T], a table queue: its rows are claimed and processed in
//     one transaction (lock mode);
//   - *Queue[jobRow], a jobs queue in lock mode (wrapped in notingFates,
//     which notes each failed job's fate for the worker's log line);
//   - *leaseRunner, a jobs queue in lease mode: a short transaction
//     leases the jobs, which run outside it.
type queueEngine interface {
	// fetch reads on db, without locking, the keys of up to limit
	// waiting rows in the queue's order.
	fetch(ctx context.Context, db bun.IDB, limit int) ([]feedKey, error)
	// probe returns fetch's read of one row as a scalar subquery (1, or
	// NULL if there is none), leaving out the rows of except, for the
	// idle watcher.
	probe(db bun.IDB, except []feedKey) *bun.SelectQuery
	// runBatch claims those of keys that are still waiting and not
	// locked (or, with keys nil, up to limit rows at the head of the
	// queue) and processes them, on the worker's session s.
	runBatch(ctx context.Context, s *session, limit int, keys []feedKey) batchResult
	// depth counts the waiting rows, up to limit.
	depth(ctx context.Context, limit int) (int, error)
	// explain returns fetch's read without its LIMIT, and the queue's
	// table, for the plan check at Start.
	explain() (*bun.SelectQuery, *schema.Table)
}

var (
	_ queueEngine = (*Queue[jobRow])(nil)
	_ queueEngine = (*leaseRunner)(nil)
)

// runner is one queue as the client runs it: what it is, its settings,
// what Start sets and checks, and its engine. Start builds one per queue
// (Queue.runner, Client.jobRunners); the workers, the feed, the idle
// watcher and the wake-up hook share it.
type runner struct {
	name  string
	table *schema.Table // nil for a jobs queue in lease mode

	runSettings

	// wake is poked (see poke) by the wake-up hook when a statement may
	// have put rows in the queue: the feed reads again.
	wake chan struct{}
	// byPrimary, set by Start, tells runBatch that the model's primary
	// key is the table's, so that claims may force the PRIMARY index.
	byPrimary *bool
	// checkQuery, if set, runs a claim that locks nothing, so that Start
	// fails on a query the server refuses (see Queue.checkQuery).
	checkQuery func(ctx context.Context) error
	// gate, set by Start, is whether the queue is paused (pause.go).
	gate *pauseGate
	// slots are the queue's GlobalLimit, nil without one (limit.go);
	// keys its KeyLimit (keylimit.go).
	slots *slots
	keys  *keyLimit
	// rate is the queue's RateLimit, nil without one; keyRate its KeyRate
	// (ratelimit.go).
	rate    *rateLimit
	keyRate *keyLimit
	// limits are the queue's limits as configured, for Stats.
	limits queueLimits
	// jobs: a queue of the jobs table (see Client.handOver).
	jobs bool

	queueEngine
}

// runSettings are the settings of a queue that the client acts on (how
// many workers, how large their batches, how often an idle queue is
// read), from its QueueConfig or JobQueueConfig with defaults applied.
type runSettings struct {
	workers   int
	batch     int           // the most rows per transaction
	selfSized bool          // batches grow and shrink by how long they take
	poll      time.Duration // how long an idle queue waits before it looks again
	timeout   time.Duration // the handlers' Timeout, if any
}

// poke wakes the queue's feed if it is waiting for rows.
func (r *runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// feedKey is the primary key of a row that a plain read (the feed's, see
// feed) found waiting: the key that a claim locks the row by.
type feedKey struct {
	id   string // readable and unique: "id=7", or "a=1,b=2"
	vals []any  // the key's values, in primary key order
	// limitKey is the row's key of its queue's KeyLimit (its slot key),
	// "" for a row without one or a queue without a KeyLimit.
	limitKey string
}

// batchResult is what one claim transaction did.
type batchResult struct {
	claimed  int      // rows locked by the claim
	got      []string // the ids of the rows locked by the claim
	done     int      // rows processed and committed
	itemErrs []error  // one *ItemError per failed row
	err      error    // what kept the batch from committing
	// oneByOne are rows to claim again one per transaction: the batch
	// handler's call timed out and took the transaction down with it.
	oneByOne []feedKey
	// untried are the ids of rows the batch was given but did not try to
	// claim: its RateLimit had no slots for them. They are not held.
	untried []string
	// work is how long the batch's handlers (and OnError) ran, one after
	// the other, while its rows were held: what sizes its next batch
	// (see batchsize).
	work time.Duration
	// leftOut is how many claimed rows the batch left out because their
	// key had no free slot (KeyLimit, KeyRate): keys are contended.
	leftOut int
}
