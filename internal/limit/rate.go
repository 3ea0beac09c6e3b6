package limit

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// A rate limit is kept with N slots of kind slotsql.Rate per queue (or
// per key): a start takes a free one, and holds it for Per (and a grace:
// see start.go) from then, by the database clock (held_until); it is
// free again once that time has passed. So no slot serves two starts
// less than Per apart, and no more than N items start in any period of
// length Per.
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
}

// NewRate returns queue's RateLimit of n per per, on db.
func NewRate(d sqldialect.Dialect, t tables.Names, db bun.IDB, queue string, n int, per time.Duration) *Rate {
	return &Rate{limit: slotsql.Limit{Queue: queue, Kind: slotsql.Rate}, n: n, per: per, sql: slotsql.New(d, t), d: d, db: db,
		claimTx: d.SkipLocked() == ""}
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

// Take takes, in tx, up to most free slots and returns them, locked, or
// a *RateWait if none is free.
func (r *Rate) Take(ctx context.Context, tx bun.IDB, most int) ([]int, error) {
	got, err := r.sql.Take(ctx, tx, r.limit, r.n, most)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: queue %q: taking slots of its RateLimit: %w", r.limit.Queue, err)
	}
	if len(got) == 0 {
		wait, err := r.sql.NextFree(ctx, tx, r.limit, r.n)
		if err != nil {
			return nil, fmt.Errorf("bunqueue: queue %q: reading its RateLimit: %w", r.limit.Queue, err)
		}
		return nil, &RateWait{Queue: r.limit.Queue, Wait: wait}
	}
	return got, nil
}

// Hold marks slots, which tx locks, as taken by holder for Per and its
// grace from now; the caller notes the time before it calls Hold, for
// the slots' covers (see Cover).
func (r *Rate) Hold(ctx context.Context, tx bun.IDB, slots []int, holder string) error {
	if err := r.sql.Hold(ctx, tx, r.limit, slots, holder, r.per+Grace(r.per)); err != nil {
		return fmt.Errorf("bunqueue: queue %q: holding slots of its RateLimit: %w", r.limit.Queue, err)
	}
	return nil
}

// TakeTokens takes up to most slots in a transaction of their own, or
// fails with a *RateWait if none is free. With no rate limit, or one
// whose slots lock-mode batches take in their claim transaction
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
		tk.slots = got
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
func (r *Rate) Taken(slots []int) *Tokens { return &Tokens{r: r, slots: slots} }
