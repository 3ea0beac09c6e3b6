// Package claim is the claim transaction of a queue in lock mode, in the
// order it runs (Queue.tryBatch): BEGIN; a slot of the GlobalLimit and
// the RateLimit's tokens; the claim of the rows, by the keys the feed
// read, with SELECT … FOR UPDATE SKIP LOCKED; the KeyLimit's and
// KeyRate's slots; the handlers, each row once its rate slots cover its
// start (internal/limit's Cover), in a savepoint taken before its
// handler's first statement; the re-check that the rows left the queue;
// the undo of the rows that did not; each row's outcome; the completion
// of the jobs queues' rows; COMMIT. Deadlocks retry the whole
// transaction (Queue.RunBatch).
//
// A Queue is generic over its model T: the rows are claimed into a []T
// and handed to the app's handler as *T. It implements engine.Work. It
// knows nothing of the public API: the root package builds it from a
// bunqueue.Queue or a jobs queue and gives it an Env.
package claim

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bunqueue/bunqueue/internal/cooldown"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/telemetry"
)

// FinishTimeout bounds the writes that finish rows and jobs after their
// context was cancelled (a lost transaction's session, a failure
// recorded apart, a lease's completion).
const FinishTimeout = 30 * time.Second

// Queue is one queue in lock mode: its query over the model T, its
// handlers and limits, and the Env it runs in. The root package fills
// it in at Client.Add; the fields marked "jobs" are set for the jobs
// queues only.
type Queue[T any] struct {
	Name  string
	Table *schema.Table // the model's
	// From, if set, is the table the queue's statements read instead of
	// the model's, as they write it: the jobs table of a client's own
	// table names (jobs).
	From string
	// Query adds the queue's conditions and ORDER BY to a select over
	// the model (bunqueue.QueryFunc).
	Query func(q *bun.SelectQuery) *bun.SelectQuery
	// Handler processes one row; Batch, if set, a batch of them at once.
	Handler func(ctx context.Context, tx bun.Tx, item *T) error
	Batch   func(ctx context.Context, tx bun.Tx, items []T) error
	// OnError, if set, records a failure in the row's savepoint.
	OnError func(ctx context.Context, tx bun.Tx, item *T, cause error) error
	// Hooks runs fn, the app's code for an item or a batch, under the
	// queue's lifecycle hooks, which info describes it to.
	Hooks   func(ctx context.Context, info func() Info, fn func() error) error
	Timeout time.Duration // the handlers' Timeout, if any
	Cool    *cooldown.Set // the rows that failed, left alone for a while

	Slots    *limit.Global // the GlobalLimit, nil without one
	KeyLimit *KeyLimit     // nil without one
	KeyRate  *KeyLimit     // nil without one
	// KeyRatePer is the KeyRate's period.
	KeyRatePer time.Duration
	// KeyOf returns an item's key of its KeyLimit or KeyRate.
	KeyOf func(item *T) (key string, val any, limited bool)
	Rate  *limit.Rate // the RateLimit, nil without one
	// ByPrimary: the model's key is the table's PRIMARY KEY (set by
	// Start), so that claims by key may force that index.
	ByPrimary bool
	// Prepares: a worker's claim of its rows and their re-check may run
	// as prepared statements (see prepare.go).
	Prepares bool

	// Trusted (jobs): the library's own handler; skip the
	// leave-the-query re-check.
	Trusted bool
	// Creator and Attrs: an item's creation context and its span's
	// attributes; Outcome, the outcome of a failure OnError recorded.
	Creator func(item *T) context.Context
	Attrs   func(item *T) []attribute.KeyValue
	Outcome func(item *T, cause error) string
	// Complete (jobs), if set, takes the items whose handlers succeeded
	// out of the queue, in one statement, before the batch commits: their
	// handlers leave that to it. With prep, the statement for one item
	// may run prepared.
	Complete func(ctx context.Context, tx bun.Tx, prep bool, items []*T) error
	// HeadIndex (jobs), if set, is the index that reads and claims at the
	// head of the queue go through, whatever the table's statistics say.
	HeadIndex string
	// ClaimColumn (jobs), if set, is a computed column that claims read
	// besides the model's, and Claimed is called with the rows of each
	// claim and the time, on this process's clock, just before its
	// statement ran.
	ClaimColumn string
	Claimed     func(items []T, at time.Time)

	Env *Env

	rekey *rekeyTarget // see rekey.go; set by Init
}

// Init readies q once its fields are set; call it before its first use.
func (q *Queue[T]) Init() {
	q.rekey = newRekeyTarget(q.Table)
}

// Env is what a queue's claims need of the client.
type Env struct {
	DB      *bun.DB // the pool
	ClaimDB *bun.DB // DB with RekeyHook, where claim transactions begin
	Dialect sqldialect.Dialect
	Tel     *telemetry.Telemetry
	Logger  *slog.Logger
	// Retry runs fn again after a deadlock or a lock wait timeout.
	Retry func(ctx context.Context, fn func() error, attrs ...metric.AddOption) error
	// CallApp runs the app's code for one item (OnError); Contain runs a
	// whole batch, so that a panic fails it, not the worker.
	CallApp func(ctx context.Context, fn func() error) error
	Contain func(ctx context.Context, fn func() error) error
	// Prepared runs fn with the statement prepared for text, if there is
	// one (ok false: nothing ran).
	Prepared func(ctx context.Context, tx bun.Tx, op, table, text string, fn func(ctx context.Context, st *sql.Stmt) error) (ok bool, err error)
	// Finished counts what a batch did, for Stats.
	Finished func(queue string, res engine.Result)
	// ErrorType is the error.type of an error, for spans.
	ErrorType func(err error) string
	// StillQueued is the error a row that did not leave its queue fails
	// with (wrapped).
	StillQueued error
	// Report turns a row's failure into the error the worker logs and
	// ProcessNext returns.
	Report func(ie *ItemError) error
}

// Info describes an item, or a batch, to the lifecycle hooks: the row's
// Key ("id=7"), or the keys of a batch handler's rows.
type Info struct {
	Key  string
	Keys []string
}

// ItemError is the failure of one row, as the pipeline settles it; Env.Report
// turns it into the error the worker logs.
type ItemError struct {
	Queue string
	Key   string // "id=42"
	Err   error
	// Recorded: OnError recorded the failure, and its writes committed.
	Recorded bool
	// Cooldown is how long this process leaves the row alone.
	Cooldown time.Duration
}

// Error implements error.
func (e *ItemError) Error() string {
	return "queue " + e.Queue + ": row " + e.Key + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *ItemError) Unwrap() error { return e.Err }
