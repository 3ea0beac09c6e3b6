package claim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/bunqueue/bunqueue/internal/txtimeout"
)

// RunBatch claims the rows of keys that still wait and are not locked
// (with keys nil: up to limit rows at the head of the queue) and processes
// them in one transaction on s (nil: on the pool), retrying the whole transaction with jitter on
// deadlocks and lock wait timeouts.
func (q *Queue[T]) RunBatch(ctx context.Context, s *claimconn.Session, limit int, keys []engine.Key) engine.Result {
	tk, err := q.Rate.TakeTokens(ctx, Want(limit, keys))
	if err != nil {
		return engine.Result{Err: err}
	}
	defer tk.Settle(ctx, q.Env.Logger)
	limit, keys, untried := Fit(tk, limit, keys)
	var res engine.Result
	_ = q.Env.Retry(ctx, func() error {
		res = q.containBatch(ctx, s, limit, keys, tk)
		return res.Err
	}, q.Env.Tel.QueueSet(q.Name, ""))
	res.Untried = append(res.Untried, untried...)
	switch {
	case len(keys) > 1 && res.Claimed == 0 && q.Env.Dialect.ClientSide(errors.Unwrap(res.Err)):
		// A row of the batch cannot be loaded into the model: claim the
		// keys one by one, so that it fails alone and the others run.
		return q.runOneByOne(ctx, s, keys, engine.Result{})
	case res.OneByOne != nil:
		// The batch handler timed out and lost the transaction: run the
		// rows alone, so that the one that hangs fails alone.
		return q.runOneByOne(ctx, s, res.OneByOne, engine.Result{Claimed: res.Claimed})
	}
	q.report(res.ItemErrs)
	q.Env.Finished(q.Name, res) // counts for Client.Stats
	return res
}

// report turns each *ItemError of errs into the error the worker logs
// (see Env.Report), in place.
func (q *Queue[T]) report(errs []error) {
	for i, err := range errs {
		if ie, ok := err.(*ItemError); ok {
			errs[i] = q.Env.Report(ie)
		}
	}
}

// containBatch is tryBatch, contained (see contain): a batch runs the
// app's code outside its handlers too (the queue's query function, the
// model's scanners and bun hooks), and a panic or a runtime.Goexit there
// fails the batch, whose transaction rolls back, and not the worker.
func (q *Queue[T]) containBatch(ctx context.Context, s *claimconn.Session, limit int, keys []engine.Key, tk *limit.Tokens) engine.Result {
	var res engine.Result
	if err := q.Env.Contain(ctx, func() error { res = q.tryBatch(ctx, s, limit, keys, tk); return nil }); err != nil {
		return engine.Result{Err: fmt.Errorf("bunqueue: queue %q: %w", q.Name, err)}
	}
	return res
}

// runOneByOne claims and processes each of keys in a transaction of its
// own, adding up the results to all.
func (q *Queue[T]) runOneByOne(ctx context.Context, s *claimconn.Session, keys []engine.Key, all engine.Result) engine.Result {
	for _, k := range keys {
		r := q.RunBatch(ctx, s, 1, []engine.Key{k})
		all.Claimed += r.Claimed
		all.Got = append(all.Got, r.Got...)
		all.Done += r.Done
		all.Completed = append(all.Completed, r.Completed...)
		all.Work += r.Work
		all.ItemErrs = append(all.ItemErrs, r.ItemErrs...)
		all.Err = errors.Join(all.Err, r.Err)
	}
	return all
}

// batchSavepoint is the savepoint of a batch handler's call.
const batchSavepoint = "bunqueue_batch"

// runWhole calls the batch handler on all items, in a savepoint that sp
// takes before its first statement. It reports whether they succeeded,
// whether the savepoint was taken, and their spans (one process span for
// the batch, linked to each item's creation context). After any other
// failure it has rolled back to the savepoint, keeping the locks, so that
// the items can run one by one; err is what must end the transaction.
func (q *Queue[T]) runWhole(ctx context.Context, tx bun.Tx, sp *claimconn.Savepoints, batchSpan trace.Span, items []T) (ok, taken bool, _ []*telemetry.Item, _ error) {
	spans := make([]*telemetry.Item, len(items))
	for i := range items {
		spans[i] = q.startItemSpan(ctx, batchSpan, &items[i], 0)
	}
	sp.Arm(tx, batchSavepoint)
	herr := q.callUnderTimeout(ctx, tx, func(ctx context.Context) error {
		return q.Hooks(ctx, func() Info { return q.batchInfo(items) },
			func() error { return q.Batch(ctx, tx, items) })
	})
	taken, err := sp.Disarm()
	switch {
	case err != nil:
		return false, taken, nil, fmt.Errorf("bunqueue: queue %q: batch handler: %w", q.Name, err)
	case herr == nil:
		return true, taken, spans, nil
	case errors.As(herr, new(*txtimeout.LostError)):
		return false, taken, spans, herr
	case q.Env.Dialect.Retryable(herr) || ctx.Err() != nil:
		return false, taken, nil, fmt.Errorf("bunqueue: queue %q: batch handler: %w", q.Name, herr)
	}
	batchSpan.AddEvent("the batch handler failed: running its rows one by one",
		trace.WithAttributes(semconv.ErrorTypeKey.String(q.Env.ErrorType(herr)), attribute.String("exception.message", herr.Error())))
	if !taken {
		return false, false, nil, nil // it ran no statement: nothing to undo
	}
	if err := q.rollbackTo(ctx, tx, batchSavepoint); err != nil {
		return false, taken, nil, err
	}
	return false, taken, nil, nil
}

// Claim locks the rows of keys that still match the queue's query,
// skipping locked ones; with keys nil, up to limit rows at the head of the
// queue. With prep, the claim of one key runs as a prepared statement
// once there is one.
//
// A claim by keys that finds some of them gone or locked (another
// process's workers took them since the feed's read) does not make up for
// them from the head of the queue: the rows there are those that the
// other processes' feeds have read too, and a claim at the head reads
// past every row that the workers of all processes hold. The feed holds
// back the keys found locked, and spreads its next reads (see engine.Feed).
func (q *Queue[T]) Claim(ctx context.Context, tx bun.Tx, prep bool, limit int, keys []engine.Key) ([]T, error) {
	at := time.Now()
	items, err := q.claimRows(ctx, tx, prep, limit, keys)
	if err == nil && q.Claimed != nil {
		q.Claimed(items, at)
	}
	return items, err
}

// claimRows is claim without the claimed hook.
func (q *Queue[T]) claimRows(ctx context.Context, tx bun.Tx, prep bool, limit int, keys []engine.Key) ([]T, error) {
	if keys == nil {
		return q.claimHead(ctx, tx, limit)
	}
	if prep {
		items, ok, err := q.claimPrepared(ctx, tx, keys)
		if ok || err != nil {
			return items, err
		}
	}
	// FORCE INDEX: a claim that walked another index would lock, for a
	// moment, rows that other workers are about to claim, and make them
	// skip those.
	items := make([]T, 0, len(keys))
	sel := q.onlyKeys(q.Apply(q.byKey(q.newClaim(tx, &items))), keys).Limit(int64(len(keys)))
	if err := sqldialect.Locking(sel, q.Env.Dialect.SkipLocked()).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return items, nil
}

// claimHead locks up to limit rows at the head of the queue that no other
// transaction holds, leaving out the rows this process cools down.
func (q *Queue[T]) claimHead(ctx context.Context, tx bun.Tx, limit int) ([]T, error) {
	items := make([]T, 0, limit)
	now := time.Now()
	sel := q.excludeFull(q.excludeCooling(q.Apply(q.atHead(q.newClaim(tx, &items))).Limit(int64(limit)), now), now)
	if err := sqldialect.Locking(sel, q.Env.Dialect.SkipLocked()).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return items, nil
}

// newClaim returns the SELECT of a claim into items: the model's
// columns, and the queue's claimColumn if it has one.
func (q *Queue[T]) newClaim(tx bun.Tx, items *[]T) *bun.SelectQuery {
	sel := q.selectFrom(tx, items)
	if q.ClaimColumn != "" {
		sel = sel.ColumnExpr("?TableColumns").ColumnExpr(q.ClaimColumn)
	}
	return sel
}

// byKey makes sel read the table by its primary key, where the dialect
// can say so and the model's key is the table's primary key.
func (q *Queue[T]) byKey(sel *bun.SelectQuery) *bun.SelectQuery {
	if hint := q.Env.Dialect.ForcePrimary(); q.ByPrimary && hint != "" {
		return sel.ModelTableExpr(q.tableName() + " AS ?TableAlias " + hint)
	}
	return sel
}

// atHead makes sel, a read or claim at the head of the queue, go through
// the queue's headIndex, where it has one and the dialect can say so: a
// claim planned as a scan (and a sort) of the table, as the planner may
// do when the statistics say that the table is small, would lock every
// waiting row it read, not only the next ones.
func (q *Queue[T]) atHead(sel *bun.SelectQuery) *bun.SelectQuery {
	if q.HeadIndex == "" {
		return sel
	}
	if hint := q.Env.Dialect.ForceIndex(q.HeadIndex); hint != "" {
		return sel.ModelTableExpr(q.tableName() + " AS ?TableAlias " + hint)
	}
	return sel
}

// stillQueued re-checks, with one query in tx, which of the items whose
// outcome is succeeded or recorded still match the queue's query. It
// looks each row up by held, the key it was claimed with, and also by its
// model's key if the handler changed that: the row is still queued if it
// is found under either. Looked up by its model's key alone, a row whose
// handler changed the key in the model only would seem to have left, and
// one whose handler changed the key in the model and the row would cool
// down under a key that names nothing.
func (q *Queue[T]) stillQueued(ctx context.Context, tx bun.Tx, prep bool, items []T, held []engine.Key, outcomes []outcome) ([]bool, error) {
	still := make([]bool, len(items))
	if q.Trusted {
		return still, nil
	}
	var probe []engine.Key
	for i := range items {
		if outcomes[i] == released || outcomes[i] == skipped {
			continue
		}
		probe = append(probe, held[i])
		if vals, id := q.Key(&items[i]); id != held[i].ID {
			probe = append(probe, engine.Key{ID: id, Vals: vals})
		}
	}
	found, err := q.queued(ctx, tx, prep, probe)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: queue %q: re-check that processed rows left the queue: %w", q.Name, err)
	}
	for i := range items {
		if outcomes[i] != released && outcomes[i] != skipped {
			_, id := q.Key(&items[i])
			still[i] = found[held[i].ID] || found[id]
		}
	}
	return still, nil
}

// queued returns the ids of those rows of keys that match the queue's
// query, read in tx. With prep, the read of one key runs as a prepared
// statement once there is one.
func (q *Queue[T]) queued(ctx context.Context, tx bun.Tx, prep bool, keys []engine.Key) (map[string]bool, error) {
	found := map[string]bool{}
	if len(keys) == 0 {
		return found, nil
	}
	// By primary key: on the queue's own index, the rows the handlers
	// just took out of the queue are entries that this transaction
	// delete-marked, and the server reads through every older version of
	// them: far more pages than the primary key's few (docs/design.md).
	var rows []T
	ok := false
	if prep {
		var err error
		if rows, ok, err = q.recheckPrepared(ctx, tx, keys); err != nil {
			return nil, err
		}
	}
	if !ok {
		rows = make([]T, 0, len(keys))
		err := q.onlyKeys(q.Apply(q.byKey(q.selectFrom(tx, &rows))).Column(q.PKNames()...), keys).
			Limit(int64(len(keys))).
			Scan(ctx)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	for i := range rows {
		_, id := q.Key(&rows[i])
		found[id] = true
	}
	return found, nil
}

// stillQueuedError is the error of a row, claimed with the key held, whose
// handler returned nil but that is still in the queue: q.Env.StillQueued,
// saying so if the handler changed the model's key.
func (q *Queue[T]) stillQueuedError(item *T, held engine.Key) error {
	if _, id := q.Key(item); id != held.ID {
		return fmt.Errorf("%w (and it changed the model's key to %s)", q.Env.StillQueued, id)
	}
	return q.Env.StillQueued
}

// keys returns the keys of items.
func (q *Queue[T]) keys(items []T) []engine.Key {
	keys := make([]engine.Key, len(items))
	for i := range items {
		keys[i].Vals, keys[i].ID = q.Key(&items[i])
	}
	return keys
}

// savepointName is the name of item i's savepoint in a batch.
func savepointName(i int) string { return "bunqueue_" + strconv.Itoa(i) }

// rollbackTo undoes what ran in tx since the savepoint name was taken.
func (q *Queue[T]) rollbackTo(ctx context.Context, tx bun.Tx, name string) error {
	if _, err := tx.ExecContext(ctx, sqldialect.RollbackTo(name)); err != nil {
		return fmt.Errorf("bunqueue: queue %q: ROLLBACK TO SAVEPOINT: %w", q.Name, err)
	}
	return nil
}
