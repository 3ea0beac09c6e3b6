package bunqueue

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// A queue's KeyLimit is kept with slots too, KeyLimit of them per value
// of its key column (internal/limit keeps them). A row whose key has no
// free slot is left out of the batch, and goes back to the queue; a key
// found full is kept out of this process's reads and claims for a
// moment, so that the rows of a full key at the head of the queue do not
// hide the others.

// keyLimit is one queue's KeyLimit (or KeyRate): n slots of kind per
// value of its key column.
type keyLimit struct {
	*limit.Keys
	column string // the key column, as the reads name it
	kind   slotsql.Kind
	n      int
}

// newKeyLimit returns the KeyLimit of q over its model's table, or nil if
// it has none, and keyOf, an item's key, if the queue has a KeyLimit or a
// KeyRate. The column must be one of the model's.
func newKeyLimit[T any](c *Client, q *Queue[T], table *schema.Table) (*keyLimit, func(*T) (string, any, bool), error) {
	col, n := q.cfg.KeyColumn, q.cfg.KeyLimit
	rated := q.cfg.KeyRate.on()
	if col == "" && n == 0 && !rated {
		return nil, nil, nil
	}
	if col == "" {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyLimit and KeyRate need a KeyColumn: got KeyLimit %d, KeyRate %v", q.name, n, q.cfg.KeyRate)
	}
	if n == 0 && !rated {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyColumn %q needs a KeyLimit or a KeyRate", q.name, col)
	}
	f, ok := table.FieldMap[col]
	if !ok {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyColumn %q is not a column of model %s", q.name, col, table.Type)
	}
	keyOf := func(item *T) (string, any, bool) { return limit.FieldKey(f.Value(reflect.ValueOf(item).Elem())) }
	return c.newKeySlots(q.name, f.Name, slotsql.Concurrency, n), keyOf, nil
}

// newKeySlots returns the n slots per key of queue's limit of kind over
// column, or nil if n is zero.
func (c *Client) newKeySlots(queue, column string, kind slotsql.Kind, n int) *keyLimit {
	if n == 0 {
		return nil
	}
	return &keyLimit{Keys: limit.NewKeys(c.dialect, c.db, queue, kind, n), column: column, kind: kind, n: n}
}

// check fails if the slots table is missing, at Start.
func (k *keyLimit) check(ctx context.Context, _ *Client) error {
	if k == nil {
		return nil
	}
	return k.Check(ctx)
}

// excludeFull leaves the rows of the keys found full (no free slot of
// the KeyLimit, no token of the KeyRate) out of sel, a read or a claim of
// q.
func (q *Queue[T]) excludeFull(sel *bun.SelectQuery, now time.Time) *bun.SelectQuery {
	var col string
	var vals []any
	for _, k := range []*keyLimit{q.keyLimit, q.keyRate} {
		if k != nil {
			col = cmp.Or(col, k.column)
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
	if q.keyLimit == nil {
		return true
	}
	run, held, err := q.keyLimit.TakeSlots(ctx, b.tx, len(b.items), func(i int) (string, any, bool) { return q.keyOf(&b.items[i]) })
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
			n++
		}
	}
	b.res.LeftOut += len(b.items) - n
	b.items, b.held, b.res.Got = b.items[:n], b.held[:n], b.res.Got[:n]
	return n > 0
}

// takeKeySlots takes, in the lease transaction tx, one slot per key among
// rows, and returns the rows that may be leased, and the slots to lease
// with them.
func (l *leaseRunner) takeKeySlots(ctx context.Context, tx bun.Tx, rows []jobRow) ([]jobRow, []heldSlot, error) {
	run, held, err := l.jobs.keyLimit.TakeSlots(ctx, tx, len(rows), func(i int) (string, any, bool) { return l.jobs.keyOf(&rows[i]) })
	if err != nil {
		return nil, nil, err
	}
	return keepRows(rows, run), held, nil
}

// keepRows returns the rows of rows that may run, in place.
func keepRows(rows []jobRow, run []bool) []jobRow {
	kept := rows[:0]
	for i := range rows {
		if run[i] {
			kept = append(kept, rows[i])
		}
	}
	return kept
}
