package limit

import (
	"context"
	"log/slog"

	"github.com/uptrace/bun"
)

// Tokens are the slots of a queue's RateLimit that one batch took: each
// item it starts uses one, and it gives the others back when it ends. A
// nil *Tokens is no rate limit: it lets every item start.
type Tokens struct {
	r      *Rate
	holder string
	slots  []int
	used   int
	inTx   bool // taken in the claim transaction, and held there (Hold)
}

// Left is how many of n items the batch may still start; all of them
// with no rate limit.
func (tk *Tokens) Left(n int) int {
	if tk == nil {
		return n
	}
	return min(n, len(tk.slots)-tk.used)
}

// Use notes that n items start.
func (tk *Tokens) Use(n int) {
	if tk != nil {
		tk.used = min(tk.used+n, len(tk.slots))
	}
}

// Hold holds, when the slots were taken in the claim transaction tx
// (TakeInClaim), the first n of them, one per item that is to run.
func (tk *Tokens) Hold(ctx context.Context, tx bun.IDB, n int) error {
	if tk == nil || !tk.inTx {
		return nil
	}
	return tk.r.Hold(ctx, tx, tk.slots[:n], tk.holder)
}

// GiveBack frees the slots that the batch did not use. A slot it fails to
// free is free when its Per has passed.
func (tk *Tokens) GiveBack(ctx context.Context, log *slog.Logger) {
	if tk == nil || tk.used == len(tk.slots) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freeTimeout)
	defer cancel()
	if err := tk.r.sql.Free(ctx, tk.r.db, tk.r.limit, tk.slots[tk.used:], tk.holder); err != nil {
		log.WarnContext(ctx, "bunqueue: giving back unused slots of a RateLimit failed; they are free once their period has passed", "queue", tk.r.limit.Queue, "error", err)
	}
}
