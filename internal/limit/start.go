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
//
// That time from take to start would be lost to the rate every Per, so
// a slot may be taken ahead, up to a lead (Lead) before its last hold
// ends: the item does not start before that end (Cover.Start waits for
// it, on this process's clock, from when the take returned), and the
// new hold runs that much longer, so that the item still starts within
// half the grace of its take plus the wait. The take's round trip, the
// claim and the items before it then overlap the last hold. A slot
// taken ahead and not used is given back at the end of its last hold,
// never before. Every hold ends Per or more after each start under it,
// and a start under a slot comes no earlier than the end of the slot's
// hold before: two starts on one slot are Per or more apart.

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

// Lead is how long before a rate slot of period per is free again a
// batch may take it (see above): half of per, at most maxLead. It is to
// cover the time from the take to the start (a commit and the claim,
// milliseconds) with its spread, and the items before it in the batch,
// whose slots come free together; the worker waits up to Lead with the
// rows or jobs it claimed for the slot. docs/performance.md gives the
// share of the limit reached with other leads.
func Lead(per time.Duration) time.Duration { return min(per/2, maxLead) }

// maxLead bounds Lead for a long Per, whose rate loses little to the
// time from take to start.
const maxLead = 50 * time.Millisecond

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
	// ready is when the slot's last hold has ended by, on this
	// process's clock, if it was taken ahead (see Lead); else zero.
	ready time.Time
	// ahead is how much longer than Per and the grace the slot was held
	// from took, for the batch's slots taken ahead: the item starts
	// without an extension within ahead and half the grace of took.
	ahead time.Duration
	// started is when Start let the item start; zero until it did.
	started time.Time
}

// Start reports whether the item may start now under c, once the
// slot's last hold has ended (it waits for that if the slot was taken
// ahead): at once within half the grace (and the wait) of the take;
// later, once it has extended the hold, on db (the claim transaction
// where it took the slot, else the pool). false: ctx ended while it
// waited, the slot is no longer the batch's, or the extension kept
// coming back too late; the item must not start.
func (c *Cover) Start(ctx context.Context, db bun.IDB) (bool, error) {
	if c == nil {
		return true, nil
	}
	if !sleepUntil(ctx, c.ready) {
		return false, nil
	}
	g := Grace(c.per)
	for try := 0; ; try++ {
		if time.Since(c.took) <= c.ahead+g/2 {
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
		c.took, c.ahead = at, 0
	}
}

// sleepUntil waits until t (at once if t has passed), and reports
// whether ctx was still alive then.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Settle ends the holds of covers, the rate slots of one batch (of one
// holder), once their items have started or will not: a slot that
// served a start is held until Per and a margin past that start (less
// than its hold from the take), the others are given back, at the end
// of their last hold for those taken ahead of it. One statement per
// key, through db, after the batch's transaction. A slot it fails to
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
			if d, held := c.rest(now); held {
				until[c.slot] = d
			} else {
				free = append(free, c.slot)
			}
		}
		if err := cs[0].sql.Settle(ctx, db, l, cs[0].holder, until, free); err != nil {
			log.WarnContext(ctx, "bunqueue: settling the slots of a rate limit failed; they are free once their hold has passed", "queue", l.Queue, "error", err)
		}
	}
}

// rest is how long from now c's slot stays held once its batch settles
// it: Per and a margin from its start, or, not used, to the end of its
// last hold if it was taken ahead of that; false: given back at once.
func (c *Cover) rest(now time.Time) (time.Duration, bool) {
	switch {
	case !c.started.IsZero():
		return c.per + margin(c.per) - now.Sub(c.started), true
	case c.ready.After(now):
		return c.ready.Sub(now), true
	}
	return 0, false
}

// Started is when Start let the item start: the instant the limit
// counted; zero if it did not.
func (c *Cover) Started() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.started
}

// Cover returns the cover of s, held by holder, with the other slots
// of its batch that ahead gives (see Ahead), through a statement sent
// after took (see Hold).
func (r *Rate) Cover(s RateSlot, holder string, took time.Time, ahead time.Duration) *Cover {
	if r == nil {
		return nil
	}
	return &Cover{sql: r.sql, limit: r.limit, slot: s.Slot, holder: holder, per: r.per, took: took, ready: s.Ready, ahead: ahead}
}
