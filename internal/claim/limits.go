package claim

import (
	"cmp"
	"context"
	"fmt"
	"github.com/uptrace/bun"
	"time"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/telemetry"
)

// keyLimit is one queue's KeyLimit (or KeyRate): n slots of kind per
// value of its key column.
type KeyLimit struct {
	*limit.Keys
	Column string // the key column, as the reads name it
	Kind   slotsql.Kind
	N      int
}

// excludeFull leaves the rows of the keys found full (no free slot of
// the KeyLimit, no token of the KeyRate) out of sel, a read or a claim of
// q.
func (q *Queue[T]) excludeFull(sel *bun.SelectQuery, now time.Time) *bun.SelectQuery {
	var col string
	var vals []any
	for _, k := range []*KeyLimit{q.KeyLimit, q.KeyRate} {
		if k != nil {
			col = cmp.Or(col, k.Column)
			vals = append(vals, k.Except(now)...)
		}
	}
	if len(vals) == 0 || len(vals) > limit.FullExcept {
		return sel
	}
	return sel.Where("(?TableAlias.? IS NULL OR ?TableAlias.? NOT IN (?))", bun.Ident(col), bun.Ident(col), bun.List(vals))
}

// takeKeySlots locks one slot per key among the claimed rows, if the
// queue has a KeyLimit, and leaves out of the batch the rows whose key
// has no free slot. The path ends here if none is left.
func (b *claimTx[T]) takeKeySlots(ctx context.Context) bool {
	q := b.q
	if q.KeyLimit == nil {
		return true
	}
	run, held, err := q.KeyLimit.TakeSlots(ctx, b.tx, len(b.items), func(i int) (string, any, bool) { return q.KeyOf(&b.items[i]) })
	if err != nil {
		b.res.Err = err
		return false
	}
	for _, h := range held {
		b.keySlots = append(b.keySlots, h.Limit.Key)
	}
	return b.keep(run)
}

// keep leaves out of the batch the rows that may not run: their key is
// full, and they go back to the queue when the transaction ends. It
// reports whether any row is left.
func (b *claimTx[T]) keep(run []bool) bool {
	n := 0
	for i := range b.items {
		if run[i] {
			b.items[n], b.held[n], b.res.Got[n] = b.items[i], b.held[i], b.res.Got[i]
			if b.keyCovers != nil {
				b.keyCovers[n] = b.keyCovers[i]
			}
			n++
		}
	}
	b.res.LeftOut += len(b.items) - n
	b.items, b.held, b.res.Got = b.items[:n], b.held[:n], b.res.Got[:n]
	if b.keyCovers != nil {
		b.keyCovers = b.keyCovers[:n]
	}
	return n > 0
}

// Fit cuts a batch to its tokens: with keys, the keys beyond them are
// left untried.
func Fit(tk *limit.Tokens, limit int, keys []engine.Key) (int, []engine.Key, []string) {
	n := tk.Left(len(keys))
	if n == len(keys) {
		return tk.Left(limit), keys, nil
	}
	untried := make([]string, 0, len(keys)-n)
	for _, k := range keys[n:] {
		untried = append(untried, k.ID)
	}
	return tk.Left(limit), keys[:n], untried
}

// Want is how many items a batch of limit rows, or of keys, may start.
func Want(limit int, keys []engine.Key) int {
	if keys != nil {
		return len(keys)
	}
	return limit
}

// takeRateTokens takes the KeyRate's slots of the claimed rows, if the
// queue has a KeyRate, and leaves out of the batch the rows whose key got
// none (see limit.Keys.TakeTokensForClaim). The path ends here if no row
// is left.
func (b *claimTx[T]) takeRateTokens(ctx context.Context) bool {
	q := b.q
	if q.KeyRate == nil {
		return true
	}
	run, covers, inTx, err := q.KeyRate.TakeTokensForClaim(ctx, b.tx, q.KeyRatePer, len(b.items),
		func(i int) (string, any, bool) { return q.KeyOf(&b.items[i]) })
	if err != nil {
		b.res.Err = err
		return false
	}
	b.keyCovers = covers
	b.keepTokens = b.keepTokens || inTx
	return b.keep(run)
}

// start reports whether item i may start now: its rate slots (the
// RateLimit's next one, its key's KeyRate one) cover a start now, or
// could be extended to (see limit.Cover), once the RateLimit's slot,
// if taken ahead, is free (start waits for that). An item that may not
// is skipped: it goes back to its queue as it was. An error ends the
// path.
// Where the slots were taken in the claim transaction (SQLite), an
// extension runs there, before the row's savepoint.
func (b *claimTx[T]) start(ctx context.Context, i int) bool {
	if b.tk == nil && b.keyCovers == nil {
		return true
	}
	ok, err := b.tk.Start(ctx, b.tx)
	at := b.tk.Started()
	if ok && b.keyCovers != nil {
		db := bun.IDB(b.q.Env.DB)
		if b.keepTokens {
			db = b.tx
		}
		ok, err = b.keyCovers[i].Start(ctx, db)
		if at.IsZero() {
			at = b.keyCovers[i].Started()
		}
	}
	if err != nil {
		b.res.Err = fmt.Errorf("bunqueue: queue %q: extending a rate slot: %w", b.q.Name, err)
		return false
	}
	if !ok {
		b.outcomes[i] = skipped
	} else if !at.IsZero() && i < len(b.spans) {
		telemetry.RateStarted(b.spans[i].Ctx, at)
	}
	return ok
}

// startAll starts the rows of a batch handler's call: those that may not
// start now (see start) are left out of the batch. The path ends here if
// none is left.
func (b *claimTx[T]) startAll(ctx context.Context) bool {
	if b.tk == nil && b.keyCovers == nil {
		return true
	}
	run := make([]bool, len(b.items))
	for i := range b.items {
		if run[i] = b.start(ctx, i); b.res.Err != nil {
			return false
		}
	}
	ok := b.keep(run)
	b.outcomes = make([]outcome, len(b.items)) // the rows left all start
	return ok
}

// takeTokensInTx takes, on SQLite, the RateLimit's slots in the claim
// transaction (see limit.Rate.TakeInClaim). Every row then runs in a
// savepoint, so that a failed handler keeps them. The path ends with a
// *limit.RateWait if none is free.
func (b *claimTx[T]) takeTokensInTx(ctx context.Context) bool {
	r := b.q.Rate
	if !r.InClaim() {
		return true
	}
	tk, err := r.TakeInClaim(ctx, b.tx, Want(b.limit, b.keys))
	if err != nil {
		b.res.Err = err
		return false
	}
	b.tk = tk
	b.limit, b.keys, b.res.Untried = Fit(b.tk, b.limit, b.keys)
	b.keepTokens = true
	return true
}

// holdTokens holds, on SQLite, one of the slots taken in the claim
// transaction per row that is to run.
func (b *claimTx[T]) holdTokens(ctx context.Context) bool {
	if err := b.tk.Hold(ctx, b.tx, len(b.items)); err != nil {
		b.res.Err = err
		return false
	}
	return true
}
