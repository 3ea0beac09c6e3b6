package limit

import (
	"context"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// A rate slot counts the start of the item it serves, not its take. An
// item starts a moment after its slot was taken (the rest of its claim,
// the handlers before it in its batch, the jobs before it in a lease
// batch), and a hold counted from the take would let the next start on
// that slot come less than Per after this one. So a slot is held for Per
// plus a grace (Grace, half of Per) from just before its take, and an
// item starts under it only within half that grace of the take
// (Cover.Start); a later start first extends the hold to Per plus the
// grace from just before the extension, if the slot is still the
// batch's. Two starts on one slot are then more than Per apart, whatever
// the delays. Once its items have started, a batch cuts each hold down
// to Per and a small margin from its item's start (Settle), so that the
// grace is not lost to the rate: a slot serves a start every Per, plus
// the margin and the time from its take to its start.

// minGrace is the least grace, for a short Per: a start on a busy
// machine needs a few milliseconds after its take.
const minGrace = 2 * time.Millisecond

// Grace is how long past Per a rate slot of period per is held from its
// take, until its batch settles it: half of per, at least minGrace. An
// item starts under it without an extension within half the grace of
// the take.
func Grace(per time.Duration) time.Duration { return max(per/2, minGrace) }

// margin is what a settled hold keeps past Per from its start: the start
// the limit counts is the engine's check, and the handler's own first
// instant comes a moment later.
func margin(per time.Duration) time.Duration { return min(Grace(per)/2, time.Millisecond) }

// extendTries bounds the extensions one start tries: each needs its
// statement to return within half the grace.
const extendTries = 3

// Cover is one rate slot held for one start: the slot, its holder, its
// period, and when it was taken (just before the statement that held
// it, on this process's clock). A nil *Cover is no rate limit.
type Cover struct {
	sql    slotsql.SQL
	limit  slotsql.Limit
	slot   int
	holder string
	per    time.Duration
	took   time.Time
	// started is when Start let the item start; zero until it did.
	started time.Time
}

// Start reports whether the item may start now under c: at once within
// half the grace of the take; later, once it has extended the hold, on
// db (the claim transaction where it took the slot, else the pool).
// false: the slot is no longer the batch's, or the extension kept coming
// back too late; the item must not start.
func (c *Cover) Start(ctx context.Context, db bun.IDB) (bool, error) {
	if c == nil {
		return true, nil
	}
	g := Grace(c.per)
	for try := 0; ; try++ {
		if time.Since(c.took) <= g/2 {
			c.started = time.Now()
			return true, nil
		}
		if try == extendTries {
			return false, nil
		}
		at := time.Now()
		n, err := c.sql.Extend(ctx, db, c.limit, []int{c.slot}, c.holder, c.per+g)
		if err != nil || n == 0 {
			return false, err
		}
		c.took = at
	}
}

// Settle ends the holds of covers, the rate slots of one batch (of one
// holder), once their items have started or will not: a slot that
// served a start is held until Per and a margin past that start (less
// than its hold from the take), the others are given back. One statement
// per key, through db, after the batch's transaction. A slot it fails to
// settle is free when its hold ends.
func Settle(ctx context.Context, log *slog.Logger, db bun.IDB, covers []*Cover) {
	byKey := map[slotsql.Limit][]*Cover{}
	var order []slotsql.Limit
	for _, c := range covers {
		if c == nil {
			continue
		}
		if _, ok := byKey[c.limit]; !ok {
			order = append(order, c.limit)
		}
		byKey[c.limit] = append(byKey[c.limit], c)
	}
	if len(order) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freeTimeout)
	defer cancel()
	now := time.Now()
	for _, l := range order {
		cs := byKey[l]
		until := map[int]time.Duration{}
		var free []int
		for _, c := range cs {
			if c.started.IsZero() {
				free = append(free, c.slot)
			} else {
				until[c.slot] = c.per + margin(c.per) - now.Sub(c.started)
			}
		}
		if err := cs[0].sql.Settle(ctx, db, l, cs[0].holder, until, free); err != nil {
			log.WarnContext(ctx, "bunqueue: settling the slots of a rate limit failed; they are free once their hold has passed", "queue", l.Queue, "error", err)
		}
	}
}

// Started is when Start let the item start: the instant the limit
// counted; zero if it did not.
func (c *Cover) Started() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.started
}

// Cover returns the cover of slot, held by holder through a statement
// sent after took (see Hold).
func (r *Rate) Cover(slot int, holder string, took time.Time) *Cover {
	if r == nil {
		return nil
	}
	return &Cover{sql: r.sql, limit: r.limit, slot: slot, holder: holder, per: r.per, took: took}
}
