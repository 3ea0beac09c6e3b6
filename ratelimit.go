package bunqueue

import (
	"fmt"
	"time"

	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
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
// The window slides: every item started counts for Per from the start
// of its handler (or job worker), so no burst goes beyond N. A start
// counts whatever becomes of the item: a handler that fails and rolls
// back has started (its email may have gone out), and a row or job that
// runs again is another start. Each of the N slots serves one start per
// Per, plus the time from its take to the handler's start and a
// millisecond: a queue kept at its limit reaches a little less than N
// per Per (docs/control.md says how much).
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

// newRate returns queue's rate limit of r, or nil if r is zero: a queue
// without one runs no statement on the slots table for it.
func (c *Client) newRate(queue string, r Rate) *limit.Rate {
	if !r.on() {
		return nil
	}
	return limit.NewRate(c.dialect, c.tables, c.db, queue, r.N, r.Per)
}

// newKeyRate returns the KeyRate of queue, configured by cfg, over its
// model's table, or nil if it has none; newKeyLimit has checked its
// KeyColumn.
func newKeyRate[T any](c *Client, queue string, cfg QueueConfig[T], table *schema.Table) *claim.KeyLimit {
	if !cfg.KeyRate.on() {
		return nil
	}
	return c.newKeySlots(queue, table.FieldMap[cfg.KeyColumn].Name, slotsql.Rate, cfg.KeyRate.N)
}
