package limit

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// A rate limit is kept with N slots of kind slotsql.Rate per queue (or
// per key): a start takes a free one, and holds it for Per (and a grace:
// see start.go) from then, by the database clock (held_until); it is
// free again once that time has passed. The queue's slots may be taken
// a lead ahead of that, for a start no earlier than it (see Lead). So
// no slot serves two starts less than Per apart, and no more than N
// items start in any period of length Per.
//
// The slots are taken, and held, in a transaction that commits whatever
// becomes of the items: in lock mode a short one of their own on the
// pool, before the claim (the queue's) or after it (the keys', known
// once the rows are read); in lease mode the lease transaction, which
// commits before the handlers run. A batch claims no more items than it
// got slots, and gives back those it did not use.

// RateWait is the outcome of a batch that found no free slot of a rate
// limit: nothing ran, and the worker waits for about Wait, until the
// first slot is free again, before it tries again. It is not a failure,
// and is ErrLimited to errors.Is.
type RateWait struct {
	Queue string
	Wait  time.Duration
}

// Error says for how long the queue's RateLimit is used up.
func (e *RateWait) Error() string {
	return fmt.Sprintf("bunqueue: queue %q: its RateLimit is used up for the next %s", e.Queue, e.Wait)
}

// Is makes a RateWait an ErrLimited.
func (e *RateWait) Is(target error) bool { return target == ErrLimited }

// Rate is the RateLimit of one queue: at most n starts in any period of
// length per.
type Rate struct {
	limit slotsql.Limit
	n     int
	per   time.Duration
	sql   slotsql.SQL
	d     sqldialect.Dialect
	db    bun.IDB
	// claimTx: lock-mode slots are taken in the claim transaction, not in
	// one of their own (SQLite, whose one writer it is: see TakeInClaim).
	claimTx bool
	// lead is how long before a slot's hold ends it may be taken (see
	// Lead): none on SQLite, where an item that waited for it in the
	// claim transaction would keep the database's one write lock.
	lead time.Duration
}

// NewRate returns queue's RateLimit of n per per, on db.
func NewRate(d sqldialect.Dialect, t tables.Names, db bun.IDB, queue string, n int, per time.Duration) *Rate {
	r := &Rate{limit: slotsql.Limit{Queue: queue, Kind: slotsql.Rate}, n: n, per: per, sql: slotsql.New(d, t), d: d, db: db,
		claimTx: d.SkipLocked() == ""}
	if !r.claimTx {
		r.lead = Lead(per)
	}
	return r
}

// RateSlot is a rate slot that a batch took: its number, and, if it was
// taken ahead (see Lead), how long its last hold still ran then, by the
// database clock, and when that hold has ended by on this process's
// clock: no item starts under it before.
type RateSlot struct {
	Slot  int
	Wait  time.Duration
	Ready time.Time
}

// Ahead is the longest Wait of slots: how much longer than Per and the
// grace a batch holds them (see Hold).
func Ahead(slots []RateSlot) time.Duration {
	var d time.Duration
	for _, s := range slots {
		d = max(d, s.Wait)
	}
	return d
}

// InClaim reports whether lock-mode batches take the slots in their
// claim transaction.
func (r *Rate) InClaim() bool { return r != nil && r.claimTx }

// Ensure creates the queue's rate slots that do not exist yet, at Start.
func (r *Rate) Ensure(ctx context.Context) error {
	if r == nil {
		return nil
	}
	return ensure(ctx, r.sql, r.d, r.db, r.limit, r.n, "RateLimit")
}

// Take takes, in tx, up to most slots that are free or free within the
// rate's lead, and returns them, locked, those free first; or a
// *RateWait if there is none.
func (r *Rate) Take(ctx context.Context, tx bun.IDB, most int) ([]RateSlot, error) {
	got, err := r.sql.TakeAhead(ctx, tx, r.limit, r.n, most, r.lead)
	back := time.Now() // the statement began before: each last hold has ended by back plus its Wait
	if err != nil {
		return nil, fmt.Errorf("bunqueue: queue %q: taking slots of its RateLimit: %w", r.limit.Queue, err)
	}
	if len(got) == 0 {
		wait, err := r.sql.NextFree(ctx, tx, r.limit, r.n)
		if err != nil {
			return nil, fmt.Errorf("bunqueue: queue %q: reading its RateLimit: %w", r.limit.Queue, err)
		}
		return nil, &RateWait{Queue: r.limit.Queue, Wait: max(wait-r.lead, 0)}
	}
	slots := make([]RateSlot, len(got))
	for i, a := range got {
		slots[i] = RateSlot{Slot: a.Slot, Wait: a.Wait}
		if a.Wait > 0 {
			slots[i].Ready = back.Add(a.Wait)
		}
	}
	slices.SortStableFunc(slots, func(a, b RateSlot) int { return cmp.Compare(a.Wait, b.Wait) })
	return slots, nil
}

// Hold marks slots, which tx locks, as taken by holder for Per, its
// grace and their Ahead from now; the caller notes the time before it
// calls Hold, for the slots' covers (see Cover).
func (r *Rate) Hold(ctx context.Context, tx bun.IDB, slots []RateSlot, holder string) error {
	nums := make([]int, len(slots))
	for i, s := range slots {
		nums[i] = s.Slot
	}
	if err := r.sql.Hold(ctx, tx, r.limit, nums, holder, r.per+Grace(r.per)+Ahead(slots)); err != nil {
		return fmt.Errorf("bunqueue: queue %q: holding slots of its RateLimit: %w", r.limit.Queue, err)
	}
	return nil
}

// TakeTokens takes up to most slots in a transaction of their own (see
// Take), or fails with a *RateWait if none is free. With no rate limit,
// or one whose slots lock-mode batches take in their claim transaction
// (TakeInClaim), it returns nil.
func (r *Rate) TakeTokens(ctx context.Context, most int) (*Tokens, error) {
	if r == nil || r.claimTx {
		return nil, nil
	}
	tk := &Tokens{r: r, holder: NewToken(), took: time.Now()}
	err := r.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		got, err := r.Take(ctx, tx, most)
		if err != nil {
			return err
		}
		tk.slots, tk.ahead = got, Ahead(got)
		return r.Hold(ctx, tx, got, tk.holder)
	})
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// TakeInClaim takes, on SQLite, up to most slots in the claim
// transaction tx, which holds the database's one write lock: a
// transaction of their own before it would wait for that lock after
// taking them, and the items would start long after their slots. Only
// those used are held (Tokens.Hold). It fails with a *RateWait if none
// is free.
func (r *Rate) TakeInClaim(ctx context.Context, tx bun.IDB, most int) (*Tokens, error) {
	slots, err := r.Take(ctx, tx, most)
	if err != nil {
		return nil, err
	}
	return &Tokens{r: r, holder: NewToken(), slots: slots, inTx: true}, nil
}

// Taken returns the tokens of slots, taken in a transaction that holds
// them itself (lease mode), to cut a batch to them.
func (r *Rate) Taken(slots []RateSlot) *Tokens { return &Tokens{r: r, slots: slots} }
