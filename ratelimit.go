package bunqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// Rate is a rate limit: at most N items of a queue (or of one key of it)
// start in any period of length Per, across every process that runs the
// queue. The zero value means no limit.
//
// A queue of emails to a partner that takes at most 20 a second:
//
//	bunqueue.QueueConfig[Email]{RateLimit: bunqueue.Rate{N: 20, Per: time.Second}}
//
// and at most 5 a second per recipient domain:
//
//	bunqueue.QueueConfig[Email]{KeyColumn: "domain", KeyRate: bunqueue.Rate{N: 5, Per: time.Second}}
//
// The window slides: every item started counts for Per from its start,
// so no burst goes beyond N. A start counts whatever becomes of the item:
// a handler that fails and rolls back has started (its email may have
// gone out), and a row or job that runs again is another start.
//
// N is at most RateMaxN; Per is at least a millisecond.
type Rate struct {
	N   int           `json:"n"`
	Per time.Duration `json:"per"` // in JSON, nanoseconds
}

// RateMaxN is the largest Rate.N: a rate of N per Per is kept as N rows
// of the bunqueue_slots table, and a greater rate is better said with a
// shorter Per (10,000 a second is 10 a millisecond).
const RateMaxN = 10_000

// String renders r as "N/Per".
func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.N, r.Per) }

// on reports whether r limits anything.
func (r Rate) on() bool { return r.N != 0 || r.Per != 0 }

// check says what is wrong with r, or nil.
func (r Rate) check() error {
	switch {
	case !r.on():
		return nil
	case r.N <= 0 || r.N > RateMaxN:
		return fmt.Errorf("N must be 1 to %d (with Per), got %v", RateMaxN, r)
	case r.Per < time.Millisecond:
		return fmt.Errorf("Per must be at least 1ms (with N), got %v", r)
	}
	return nil
}

// A RateLimit or KeyRate is kept with rate slots (internal/limit keeps
// them): a start holds one for Per, in a transaction that commits
// whatever becomes of the item; a batch claims no more items than it got
// slots, and gives back those it did not use.

// rateLimit is the RateLimit of one queue.
type rateLimit = limit.Rate

// tokens are the slots of a queue's RateLimit that one batch took; nil
// without a RateLimit.
type tokens = limit.Tokens

// newRate returns queue's rate limit of r, or nil if r is zero: a queue
// without one runs no statement on the slots table for it.
func (c *Client) newRate(queue string, r Rate) *rateLimit {
	if !r.on() {
		return nil
	}
	return limit.NewRate(c.dialect, c.db, queue, r.N, r.Per)
}

// newKeyRate returns the KeyRate of q over its model's table, or nil if
// it has none; newKeyLimit has checked its KeyColumn.
func newKeyRate[T any](c *Client, q *Queue[T], table *schema.Table) *keyLimit {
	if !q.cfg.KeyRate.on() {
		return nil
	}
	return c.newKeySlots(q.name, table.FieldMap[q.cfg.KeyColumn].Name, slotsql.Rate, q.cfg.KeyRate.N)
}

// fit cuts a batch to its tokens: with keys, the keys beyond them are
// left untried.
func fit(tk *tokens, limit int, keys []engine.Key) (int, []engine.Key, []string) {
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

// want is how many items a batch of limit rows, or of keys, may start.
func want(limit int, keys []engine.Key) int {
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
	if q.keyRate == nil {
		return true
	}
	run, inTx, err := q.keyRate.TakeTokensForClaim(ctx, b.tx, q.cfg.KeyRate.Per, len(b.items),
		func(i int) (string, any, bool) { return q.keyOf(&b.items[i]) })
	if err != nil {
		b.res.Err = err
		return false
	}
	b.keepTokens = b.keepTokens || inTx
	return b.keep(run)
}

// takeTokensInTx takes, on SQLite, the RateLimit's slots in the claim
// transaction (see limit.Rate.TakeInClaim). Every row then runs in a
// savepoint, so that a failed handler keeps them. The path ends with a
// *limit.RateWait if none is free.
func (b *claimTx[T]) takeTokensInTx(ctx context.Context) bool {
	r := b.q.rate
	if !r.InClaim() {
		return true
	}
	tk, err := r.TakeInClaim(ctx, b.tx, want(b.limit, b.keys))
	if err != nil {
		b.res.Err = err
		return false
	}
	b.tk = tk
	b.limit, b.keys, b.res.Untried = fit(b.tk, b.limit, b.keys)
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

// takeRateTokens takes, in the lease transaction tx, the KeyRate's slots
// of rows, if the queue has a KeyRate, and returns the rows that may be
// leased.
func (l *leaseRunner) takeRateTokens(ctx context.Context, tx bun.Tx, rows []jobRow) ([]jobRow, error) {
	k := l.jobs.keyRate
	if k == nil || len(rows) == 0 {
		return rows, nil
	}
	run, err := k.TakeTokens(ctx, tx, l.cfg.KeyRate.Per, len(rows), func(i int) (string, any, bool) { return l.jobs.keyOf(&rows[i]) })
	if err != nil {
		return nil, err
	}
	return keepRows(rows, run), nil
}
