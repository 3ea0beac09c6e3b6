package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/bunqueue/bunqueue/internal/txtimeout"
)

// outcome of one item of a batch.
type outcome int

const (
	succeeded outcome = iota // handler returned nil
	recorded                 // handler failed, OnError recorded it
	released                 // handler failed, nothing recorded: row goes back
	skipped                  // not started: no rate slot covered it (see start)
)

// tryBatch runs one claim transaction of q, once (RunBatch retries it):
// it claims the rows of keys (with keys nil: up to limit rows at the head
// of the queue), runs their handlers, re-checks that the rows they
// processed left the queue, settles each row's outcome and commits. With
// a RateLimit it claims no more rows than tk has left.
func (q *Queue[T]) tryBatch(ctx context.Context, s *claimconn.Session, limit int, keys []engine.Key, tk *limit.Tokens) engine.Result {
	limit, keys, _ = Fit(tk, limit, keys)
	b := &claimTx[T]{q: q, s: s, limit: limit, keys: keys, prep: s != nil && q.Prepares, tk: tk}
	defer b.end(ctx)
	// Under a GlobalLimit (or a RateLimit kept in the transaction) the
	// batch's span starts once the transaction holds a slot, so that a
	// worker waiting for one leaves no trace per look; else before BEGIN,
	// so that the whole transaction is in it.
	if q.Slots == nil && !q.Rate.InClaim() {
		ctx, b.span = q.Env.Tel.StartBatch(ctx, q.Name)
	}
	if !b.begin(ctx) || !b.takeSlot(ctx) || !b.takeTokensInTx(ctx) {
		return b.res
	}
	if b.span == nil {
		ctx, b.span = q.Env.Tel.StartBatch(ctx, q.Name)
	}
	if !b.claim(ctx) || !b.takeKeySlots(ctx) || !b.takeRateTokens(ctx) || !b.holdTokens(ctx) ||
		!b.run(ctx) || !b.recheck(ctx) || !b.undo(ctx) {
		return b.res
	}
	b.settle()
	b.commit(ctx)
	return b.res
}

// claimTx is one claim transaction of a table queue, on its way from
// BEGIN to COMMIT. Each step of the path is a method that reports whether
// the path goes on; one that ends it has said why in res.
type claimTx[T any] struct {
	q     *Queue[T]
	s     *claimconn.Session // the worker's session; nil: on the pool
	limit int                // with keys nil: the most rows to claim at the head
	keys  []engine.Key       // the rows to claim, as the feed read them
	prep  bool               // prepared statements serve the workers, from Start to Stop

	span      trace.Span        // the batch's span
	spans     []*telemetry.Item // the items' spans
	began     time.Time         // before BEGIN: the claim's duration starts here
	tx        bun.Tx
	open      bool // tx has not ended: end rolls it back
	sessionID sqldialect.TxSession
	sp        *claimconn.Savepoints // takes each handler's savepoint before its first statement

	items []T
	held  []engine.Key // the rows' keys as claimed: a handler may change its model's key
	// withSavepoints: each row runs in its own savepoint, see run.
	withSavepoints bool
	whole          bool // a batch handler took all the items at once
	wholeTaken     bool // the batch handler took its savepoint: it ran a statement
	outcomes       []outcome
	causes         []error
	taken          []bool   // the row's savepoint was taken: its handler or OnError ran a statement
	still          []bool   // after the re-check: the row still matches the queue's query
	rekeyed        []string // the key column a row's handler set in SQL only, or ""
	undoneFrom     int      // after the re-check: the first row undone, or -1

	keySlots []string      // the keys whose KeyLimit slots the transaction holds
	tk       *limit.Tokens // the RateLimit's slots taken for the batch, nil without one
	// keyCovers are the KeyRate's slots of the rows, by row (a nil one
	// for a row without a key); nil without a KeyRate.
	keyCovers []*limit.Cover
	// keepTokens: the KeyRate's slots were taken in the transaction
	// (SQLite): each row runs in a savepoint, so that a failure keeps them.
	keepTokens bool

	succeeded []string // the ids of the rows whose handlers succeeded
	completed []*T     // those rows, for q.Complete
	res       engine.Result
}

// end rolls back the transaction if it is still open, settles the
// rate slots of its rows (see limit.Settle), and ends the
// spans. A batch that did not commit leaves every row as it was: each
// item's span says so.
func (b *claimTx[T]) end(ctx context.Context) {
	if b.open {
		_ = b.tx.Rollback()
	}
	if len(b.keySlots) > 0 {
		b.q.KeyLimit.Freed(b.keySlots)
	}
	limit.Settle(ctx, b.q.Env.Logger, b.q.Env.DB, b.keyCovers)
	if b.q.Rate.InClaim() {
		b.tk.Settle(ctx, b.q.Env.Logger) // taken in this transaction (SQLite); else RunBatch settles them
	}
	tel := b.q.Env.Tel
	for _, it := range b.spans {
		if b.res.Err != nil {
			it.Outcome = telemetry.OutcomeReleased
			if it.Err == nil {
				it.Err = b.res.Err
			}
		}
		tel.End(it)
	}
	if b.span != nil {
		tel.EndSpan(b.span, b.res.Err)
	}
}

// begin starts the transaction, on the worker's session if it has one,
// and reads its server session where a handler's timeout may need to end
// it.
func (b *claimTx[T]) begin(ctx context.Context) bool {
	q := b.q
	b.began = time.Now()
	tx, sp, err := b.s.Begin(ctx, q.Env.ClaimDB)
	if err != nil {
		b.res.Err = fmt.Errorf("bunqueue: queue %q: begin: %w", q.Name, err)
		return false
	}
	b.tx, b.sp, b.open = tx, sp, true
	if b.sessionID, err = q.sessionID(ctx, b.s, tx); err != nil {
		b.res.Err = fmt.Errorf("bunqueue: queue %q: %w", q.Name, err)
		return false
	}
	return true
}

// takeSlot locks a slot of the queue's GlobalLimit, if it has one, for
// the transaction's duration; the path ends with limit.ErrLimited if every
// slot is held.
func (b *claimTx[T]) takeSlot(ctx context.Context) bool {
	if b.q.Slots == nil {
		return true
	}
	if _, err := b.q.Slots.Take(ctx, b.tx); err != nil {
		b.res.Err = err
		return false
	}
	return true
}

// lose ends a batch whose transaction a handler's timeout took down:
// every row is back in the queue as it was.
func (b *claimTx[T]) lose() {
	_ = b.tx.Rollback()
	b.open = false
	if b.s != nil {
		b.s.End()
	}
	for _, it := range b.spans {
		it.Outcome = telemetry.OutcomeReleased
	}
}

// claim locks the rows (see Queue.Claim) and keeps their keys as
// claimed. A lone key whose row cannot be loaded into the model is that
// row's failure, not the batch's. The path ends here if nothing was
// claimed.
func (b *claimTx[T]) claim(ctx context.Context) bool {
	q := b.q
	items, err := q.Claim(ctx, b.tx, b.prep, b.limit, b.keys)
	if err != nil {
		b.res.Err = fmt.Errorf("bunqueue: queue %q: claim: %w", q.Name, err)
		if len(b.keys) == 1 && q.Env.Dialect.ClientSide(err) {
			// The row cannot be loaded into the model (a value that does
			// not fit it): its failure, not the batch's.
			b.res.Err = nil
			k := b.keys[0]
			b.res.ItemErrs = append(b.res.ItemErrs, &ItemError{Queue: q.Name, Key: k.ID,
				Err:      fmt.Errorf("the row cannot be loaded into the model: %w", err),
				Cooldown: q.Cool.Add(k.ID, k.Vals, time.Now())})
		}
		return false
	}
	b.items = items
	b.held = q.keys(items)
	b.res.Claimed = len(items)
	b.res.Got = make([]string, len(items))
	for i, k := range b.held {
		b.res.Got[i] = k.ID
	}
	q.Env.Tel.Claimed(ctx, b.span, q.Name, len(items), b.began)
	return len(items) > 0
}

// run calls the handlers: the batch handler on all the items at once if
// the queue has one, else (or after it failed) each item's handler in
// turn.
//
// Each row runs in its own savepoint when a failure must be undone
// while the others' writes (or the row's lock, for OnError) are kept,
// taken before the first statement of its handler (see savepoints).
// A lone row without OnError needs none: a failure rolls back it all.
func (b *claimTx[T]) run(ctx context.Context) bool {
	b.withSavepoints = len(b.items) > 1 || b.q.OnError != nil || b.keepTokens
	b.outcomes = make([]outcome, len(b.items))
	b.causes = make([]error, len(b.items))
	b.taken = make([]bool, len(b.items))
	b.rekeyed = make([]string, len(b.items))
	if b.q.Batch != nil && len(b.items) > 1 {
		if !b.startAll(ctx) || !b.runWhole(ctx) {
			return false
		}
		if b.whole {
			return true
		}
	}
	for i := range b.items {
		if !b.runItem(ctx, i) {
			return false
		}
	}
	return true
}

// runWhole calls the batch handler (see Queue.runWhole). If its timeout
// took the transaction down, the rows are to run again one by one, each
// in a transaction of its own, so that the one that hangs fails alone.
func (b *claimTx[T]) runWhole(ctx context.Context) bool {
	hctx, rk := b.q.watchRekey(ctx)
	b.sp.Stmts.Start()
	began := time.Now()
	b.whole, b.wholeTaken, b.spans, b.res.Err = b.q.runWhole(hctx, b.tx, b.sp, b.span, b.items)
	b.res.Work += b.sp.Stmts.Work(time.Since(began))
	for i := range b.rekeyed {
		b.rekeyed[i] = rk.changed()
	}
	if errors.As(b.res.Err, new(*txtimeout.LostError)) {
		b.lose()
		b.span.AddEvent("the batch handler timed out and its transaction was lost: running its rows one by one")
		b.q.endLost(ctx, b.sessionID, b.held)
		b.res.Err = nil
		b.res.OneByOne = b.held
		return false
	}
	return b.res.Err == nil
}

// runItem calls the handler of item i, in its savepoint if it has one,
// under its span and the queue's hooks.
func (b *claimTx[T]) runItem(ctx context.Context, i int) bool {
	q := b.q
	claimed := b.items[i] // as claimed: OnError sees the row before the handler's changes
	it := q.startItemSpan(ctx, b.span, &b.items[i], len(b.items))
	b.spans = append(b.spans, it)
	if !b.start(ctx, i) {
		return b.res.Err == nil // not started: back in the queue as it was
	}
	b.armSavepoint(i)
	tx := b.tx
	hctx, rk := q.watchRekey(it.Ctx)
	b.sp.Stmts.Start()
	began := time.Now()
	herr := q.callUnderTimeout(hctx, tx, func(ctx context.Context) error {
		return q.Hooks(ctx, func() Info { return q.workInfo(&b.items[i]) },
			func() error { return q.Handler(ctx, tx, &b.items[i]) })
	})
	b.res.Work += b.sp.Stmts.Work(time.Since(began))
	b.rekeyed[i] = rk.changed()
	if !b.disarmSavepoint(i) {
		return false
	}
	if herr == nil {
		return true
	}
	it.Err = herr
	return b.itemFailed(ctx, i, it, &claimed, herr)
}

// itemFailed handles the failure herr of item i's handler: a lost
// transaction ends the batch with the item's failure recorded on its
// own; a deadlock, or a stop, ends the batch; a lone row without
// savepoints rolls back the transaction; else the item's writes are
// undone to its savepoint and OnError, if set, may record the failure.
func (b *claimTx[T]) itemFailed(ctx context.Context, i int, it *telemetry.Item, claimed *T, herr error) bool {
	q := b.q
	if errors.As(herr, new(*txtimeout.LostError)) {
		b.lose()
		ie := q.failLost(ctx, b.sessionID, []T{*claimed}, herr)[0].(*ItemError)
		if ie.Recorded {
			it.Outcome = q.failureOutcome(claimed, herr)
		}
		b.res.ItemErrs = append(b.res.ItemErrs, ie)
		return false
	}
	if q.Env.Dialect.Retryable(herr) || ctx.Err() != nil {
		// The server may have rolled back the whole transaction
		// (deadlock), or we are stopping: retry or release the batch.
		b.res.Err = fmt.Errorf("bunqueue: queue %q: handler: %w", q.Name, herr)
		return false
	}
	if !b.withSavepoints {
		_ = b.tx.Rollback()
		b.open = false // nothing left to roll back
		it.Outcome = telemetry.OutcomeReleased
		k := b.held[i]
		b.res.ItemErrs = append(b.res.ItemErrs, &ItemError{Queue: q.Name, Key: k.ID, Err: herr, Cooldown: q.Cool.Add(k.ID, k.Vals, time.Now())})
		return false
	}
	if !b.rollbackItem(ctx, i) {
		return false
	}
	b.outcomes[i], b.causes[i] = released, herr
	if q.OnError == nil {
		return true
	}
	return b.onError(ctx, i, claimed, herr)
}

// armSavepoint makes the next statement in the transaction take item
// i's savepoint, if the batch runs its items in savepoints and i has not
// taken its own yet.
func (b *claimTx[T]) armSavepoint(i int) {
	if b.withSavepoints && !b.taken[i] {
		b.sp.Arm(b.tx, savepointName(i))
	}
}

// disarmSavepoint ends armSavepoint's arm, noting whether item i took
// its savepoint; the path ends if taking it failed.
func (b *claimTx[T]) disarmSavepoint(i int) bool {
	if !b.withSavepoints || b.taken[i] {
		return true
	}
	taken, err := b.sp.Disarm()
	b.taken[i] = taken
	if err != nil {
		b.res.Err = fmt.Errorf("bunqueue: queue %q: %w", b.q.Name, err)
		return false
	}
	return true
}

// rollbackItem undoes the writes of item i back to its savepoint, if it
// took one: without one, its handler (and OnError) ran no statement.
func (b *claimTx[T]) rollbackItem(ctx context.Context, i int) bool {
	if !b.taken[i] {
		return true
	}
	if err := b.q.rollbackTo(ctx, b.tx, savepointName(i)); err != nil {
		b.res.Err = err
		return false
	}
	return true
}

// onError lets OnError record the failure herr of item i, whose writes
// were undone. If OnError fails too, its writes are undone as well and
// the row is released, with both errors.
func (b *claimTx[T]) onError(ctx context.Context, i int, claimed *T, herr error) bool {
	q := b.q
	b.armSavepoint(i)
	b.sp.Stmts.Start()
	began := time.Now()
	oerr := q.Env.CallApp(ctx, func() error { return q.OnError(ctx, b.tx, claimed, herr) })
	b.res.Work += b.sp.Stmts.Work(time.Since(began))
	if !b.disarmSavepoint(i) {
		return false
	}
	if oerr != nil {
		if q.Env.Dialect.Retryable(oerr) || ctx.Err() != nil {
			b.res.Err = fmt.Errorf("bunqueue: queue %q: OnError: %w", q.Name, oerr)
			return false
		}
		if !b.rollbackItem(ctx, i) {
			return false
		}
		b.causes[i] = fmt.Errorf("%w; OnError failed too: %w", herr, oerr)
		return true
	}
	b.outcomes[i] = recorded
	return true
}

// recheck reads which of the processed rows still match the queue's
// query (see Queue.stillQueued), counts as still queued a row whose
// handler changed its key in SQL only (see rekey.go), and finds the
// first row to undo: the first whose handler succeeded but that is still
// in the queue (it breaks the rule) and whose writes cannot be undone
// alone (see firstUndone).
func (b *claimTx[T]) recheck(ctx context.Context) bool {
	still, err := b.q.stillQueued(ctx, b.tx, b.prep, b.items, b.held, b.outcomes)
	if err != nil {
		b.res.Err = err
		return false
	}
	b.still = still
	for i := range b.items {
		// Gone under the key it was claimed with, but the handler gave
		// it another, in SQL only: perhaps still queued under that.
		if _, id := b.q.Key(&b.items[i]); b.rekeyed[i] != "" && id == b.held[i].ID && !still[i] && b.outcomes[i] == succeeded {
			still[i] = true
		} else {
			b.rekeyed[i] = ""
		}
	}
	b.undoneFrom = b.firstUndone()
	return true
}

// firstUndone returns the first row whose writes, and those of every row
// after it, must be undone, or -1. A row that broke the rule is undone;
// savepoints nest, so the rows after it are undone with it and return to
// the queue. But a row that broke the rule in its own savepoint without
// taking it ran no statement: it has nothing to undo, and the rows after
// it are kept. A batch handler's writes cannot be told apart: all its
// rows are undone.
func (b *claimTx[T]) firstUndone() int {
	for i := range b.items {
		if b.outcomes[i] != succeeded || !b.still[i] {
			continue
		}
		switch {
		case b.whole:
			return 0
		case !b.withSavepoints || b.taken[i]:
			return i
		}
	}
	return -1
}

// undo undoes the writes of the rows from undoneFrom on, if any.
// Savepoints nest, so rolling back to its savepoint also undoes the
// items after it; those return to the queue.
func (b *claimTx[T]) undo(ctx context.Context) bool {
	q := b.q
	if b.undoneFrom < 0 {
		return true
	}
	switch {
	case b.whole:
		// The batch handler's writes cannot be told apart: undo them
		// all (if it wrote any); the other rows return to the queue too.
		if !b.wholeTaken {
			return true
		}
		if err := q.rollbackTo(ctx, b.tx, batchSavepoint); err != nil {
			b.res.Err = err
			return false
		}
	case b.withSavepoints:
		if !b.rollbackItem(ctx, b.undoneFrom) {
			return false
		}
	default:
		_ = b.tx.Rollback()
		b.open = false
	}
	return true
}

// settle gives each row its outcome: completed, recorded by OnError,
// undone with a row before it, or released and cooled down with its
// error.
func (b *claimTx[T]) settle() {
	q := b.q
	now := time.Now()
	for i := range b.items {
		id := b.res.Got[i]
		undone := b.undoneFrom >= 0 && i >= b.undoneFrom
		ie := &ItemError{Queue: q.Name, Key: id, Err: b.causes[i]}
		it := b.spans[i]
		it.Outcome = telemetry.OutcomeReleased
		switch {
		case b.outcomes[i] == skipped:
			continue // not started: back in the queue as it was
		case b.outcomes[i] == succeeded && b.still[i] && b.rekeyed[i] != "":
			ie.Err = q.keyChangedError(b.rekeyed[i])
			it.Err = ie.Err
		case b.outcomes[i] == succeeded && b.still[i]:
			ie.Err = q.stillQueuedError(&b.items[i], b.held[i])
			it.Err = ie.Err
		case b.outcomes[i] == succeeded && undone:
			continue // undone with a row before it; back in the queue as it was
		case b.outcomes[i] == succeeded:
			it.Outcome = telemetry.OutcomeCompleted
			b.succeeded = append(b.succeeded, id)
			b.completed = append(b.completed, &b.items[i])
			continue
		case b.outcomes[i] == recorded && !undone && !b.still[i]:
			ie.Recorded = true
			it.Outcome = q.failureOutcome(&b.items[i], b.causes[i])
			b.res.ItemErrs = append(b.res.ItemErrs, ie)
			continue
		case b.outcomes[i] == recorded && !undone:
			ie.Recorded = true
			ie.Err = fmt.Errorf("%w (recorded by OnError, but the row still matches the queue query)", b.causes[i])
			it.Outcome = telemetry.OutcomeFailed
		}
		ie.Cooldown = q.Cool.Add(id, b.held[i].Vals, now)
		b.res.ItemErrs = append(b.res.ItemErrs, ie)
	}
}

// commit takes the completed rows out of the queue where the queue does
// that itself (q.Complete), commits, and forgets the cooldowns of the
// rows that succeeded.
func (b *claimTx[T]) commit(ctx context.Context) {
	q := b.q
	if q.Complete != nil && len(b.completed) > 0 && b.open {
		if err := q.Complete(ctx, b.tx, b.prep, b.completed); err != nil {
			b.res.Err = fmt.Errorf("bunqueue: queue %q: complete: %w", q.Name, err)
			return
		}
	}
	if b.open {
		if err := b.tx.Commit(); err != nil {
			b.open = false // database/sql has ended the transaction either way
			b.res.Err = fmt.Errorf("bunqueue: queue %q: commit: %w", q.Name, err)
			return
		}
		b.open = false
	}
	for _, id := range b.succeeded {
		q.Cool.Forget(id)
	}
	b.res.Done, b.res.Completed = len(b.succeeded), b.succeeded
}
