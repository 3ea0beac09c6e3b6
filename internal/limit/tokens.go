package limit

import (
	"context"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
)

// Tokens are the slots of a queue's RateLimit that one batch took: each
// item it starts uses one (Start), and it gives the others back when it
// ends. A nil *Tokens is no rate limit: it lets every item start.
type Tokens struct {
	r      *Rate
	holder string
	slots  []RateSlot
	took   time.Time     // just before the slots were held, for their covers
	ahead  time.Duration // how much longer they were held (see Ahead)
	// started are, for each slot spent so far (the first len(started)),
	// when its item started; zero for a slot that did not serve a start.
	started []time.Time
	inTx    bool // taken in the claim transaction, and held there (Hold)
}

// Left is how many of n items the batch may still start; all of them
// with no rate limit.
func (tk *Tokens) Left(n int) int {
	if tk == nil {
		return n
	}
	return min(n, len(tk.slots)-len(tk.started))
}

// Start reports whether the batch's next item may start now, under the
// next of its slots (see Cover.Start), and uses that slot; tx is the
// claim transaction, where the slots were taken on SQLite. false: it may
// not start (the batch has no slot left for it, or the slot's hold could
// not be extended to cover a late start): it goes back to its queue as
// it was.
func (tk *Tokens) Start(ctx context.Context, tx bun.IDB) (bool, error) {
	if tk == nil {
		return true, nil
	}
	spent := len(tk.started)
	if spent >= len(tk.slots) {
		return false, nil
	}
	db := tk.r.db
	if tk.inTx {
		db = tx
	}
	c := tk.r.Cover(tk.slots[spent], tk.holder, tk.took, tk.ahead)
	ok, err := c.Start(ctx, db)
	tk.started = append(tk.started, c.started) // started or not, the slot is spent: a late one may be another's
	return ok, err
}

// Started is when the batch's last item to start (see Start) started:
// the instant the limit counted; zero if it did not start.
func (tk *Tokens) Started() time.Time {
	if tk == nil || len(tk.started) == 0 {
		return time.Time{}
	}
	return tk.started[len(tk.started)-1]
}

// Hold holds, when the slots were taken in the claim transaction tx
// (TakeInClaim), the first n of them, one per item that is to run.
func (tk *Tokens) Hold(ctx context.Context, tx bun.IDB, n int) error {
	if tk == nil || !tk.inTx {
		return nil
	}
	tk.took, tk.ahead = time.Now(), Ahead(tk.slots[:n])
	return tk.r.Hold(ctx, tx, tk.slots[:n], tk.holder)
}

// Settle ends the batch's holds, once its items have started: see
// Settle. A slot the batch did not use is given back.
func (tk *Tokens) Settle(ctx context.Context, log *slog.Logger) {
	if tk == nil || len(tk.slots) == 0 {
		return
	}
	covers := make([]*Cover, len(tk.slots))
	for i, slot := range tk.slots {
		covers[i] = tk.r.Cover(slot, tk.holder, tk.took, tk.ahead)
		if i < len(tk.started) {
			covers[i].started = tk.started[i]
		}
	}
	Settle(ctx, log, tk.r.db, covers)
}
