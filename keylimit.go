package bunqueue

import (
	"context"
	"fmt"
	"reflect"

	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// A queue's KeyLimit is kept with slots too, KeyLimit of them per value
// of its key column (internal/limit keeps them). A row whose key has no
// free slot is left out of the batch, and goes back to the queue; a key
// found full is kept out of this process's reads and claims for a
// moment, so that the rows of a full key at the head of the queue do not
// hide the others.

// newKeyLimit returns the KeyLimit of queue, configured by cfg, over its
// model's table, or nil if it has none, and keyOf, an item's key, if the
// queue has a KeyLimit or a KeyRate. The column must be one of the
// model's.
func newKeyLimit[T any](c *Client, queue string, cfg QueueConfig[T], table *schema.Table) (*claim.KeyLimit, func(*T) (string, any, bool), error) {
	col, n := cfg.KeyColumn, cfg.KeyLimit
	rated := cfg.KeyRate.on()
	if col == "" && n == 0 && !rated {
		return nil, nil, nil
	}
	if col == "" {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyLimit and KeyRate need a KeyColumn: got KeyLimit %d, KeyRate %v", queue, n, cfg.KeyRate)
	}
	if n == 0 && !rated {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyColumn %q needs a KeyLimit or a KeyRate", queue, col)
	}
	f, ok := table.FieldMap[col]
	if !ok {
		return nil, nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.KeyColumn %q is not a column of model %s", queue, col, table.Type)
	}
	keyOf := func(item *T) (string, any, bool) { return limit.FieldKey(f.Value(reflect.ValueOf(item).Elem())) }
	return c.newKeySlots(queue, f.Name, slotsql.Concurrency, n), keyOf, nil
}

// newKeySlots returns the n slots per key of queue's limit of kind over
// column, or nil if n is zero.
func (c *Client) newKeySlots(queue, column string, kind slotsql.Kind, n int) *claim.KeyLimit {
	if n == 0 {
		return nil
	}
	return &claim.KeyLimit{Keys: limit.NewKeys(c.dialect, c.tables, c.db, queue, kind, n), Column: column, Kind: kind, N: n}
}

// checkKeys fails if the slots table of k, a KeyLimit or KeyRate, is
// missing, at Start.
func checkKeys(ctx context.Context, k *claim.KeyLimit) error {
	if k == nil {
		return nil
	}
	return k.Check(ctx)
}
