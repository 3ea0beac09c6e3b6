package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/backoff"
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

// A rate limit is kept with N slots of kind slotsql.Rate per queue (or
// per key): a start takes a free one, and holds it for Per from then, by
// the database clock (held_until); it is free again once that time has
// passed. So no slot serves two starts less than Per apart, and no more
// than N items start in any period of length Per.
//
// The slots are taken, and held, in a transaction that commits whatever
// becomes of the items: in lock mode a short one of their own on the
// pool, before the claim (the queue's) or after it (the keys', known
// once the rows are read); in lease mode the lease transaction, which
// commits before the handlers run. A batch claims no more items than it
// got slots, and gives back those it did not use.

// rateWait is the outcome of a batch that found no free slot of a rate
// limit: nothing ran, and the worker waits for about wait, until the
// first slot is free again, before it tries again. It is not a failure,
// and is errLimited to the worker.
type rateWait struct {
	queue string
	wait  time.Duration
}

func (e *rateWait) Error() string {
	return fmt.Sprintf("bunqueue: queue %q: its RateLimit is used up for the next %s", e.queue, e.wait)
}

func (e *rateWait) Is(target error) bool { return target == errLimited }

// rateLimit is the RateLimit of one queue.
type rateLimit struct {
	limit slotsql.Limit
	rate  Rate
	sql   slotsql.SQL
	db    *bun.DB
	// claimTx: lock-mode slots are taken in the claim transaction, not in
	// one of their own (SQLite, whose one writer it is: see
	// claimTx.takeTokensInTx).
	claimTx bool
}

// inClaim reports whether lock-mode batches take the slots in their
// claim transaction.
func (r *rateLimit) inClaim() bool { return r != nil && r.claimTx }

// newRate returns queue's rate limit of r, or nil if r is zero: a queue
// without one runs no statement on the slots table for it.
func (c *Client) newRate(queue string, r Rate) *rateLimit {
	if !r.on() {
		return nil
	}
	return &rateLimit{limit: slotsql.Limit{Queue: queue, Kind: slotsql.Rate}, rate: r, sql: slotsql.New(c.dialect), db: c.db,
		claimTx: c.dialect.SkipLocked() == ""}
}

// newKeyRate returns the KeyRate of q over its model's table, or nil if
// it has none; newKeyLimit has checked its KeyColumn.
func newKeyRate[T any](c *Client, q *Queue[T], table *schema.Table) *keyLimit {
	if !q.cfg.KeyRate.on() {
		return nil
	}
	return c.newKeySlots(q.name, table.FieldMap[q.cfg.KeyColumn].Name, slotsql.Rate, q.cfg.KeyRate.N)
}

// ensure creates the queue's rate slots that do not exist yet, at Start.
func (r *rateLimit) ensure(ctx context.Context, c *Client) error {
	if r == nil {
		return nil
	}
	if err := r.sql.Ensure(ctx, c.db, r.limit, r.rate.N); err != nil {
		if c.dialect.MissingTable(err) {
			return fmt.Errorf("bunqueue: queue %q: its RateLimit needs the %s table of schema version 6: run bunqueue.Migrate (or apply bunqueue.MigrationSQL): %w",
				r.limit.Queue, slotsql.Slots, err)
		}
		return fmt.Errorf("bunqueue: queue %q: creating the slots of its RateLimit: %w", r.limit.Queue, err)
	}
	return nil
}

// take takes, in tx, up to most free slots and returns them, locked, or
// a *rateWait if none is free.
func (r *rateLimit) take(ctx context.Context, tx bun.IDB, most int) ([]int, error) {
	got, err := r.sql.Take(ctx, tx, r.limit, r.rate.N, most)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: queue %q: taking slots of its RateLimit: %w", r.limit.Queue, err)
	}
	if len(got) == 0 {
		wait, err := r.sql.NextFree(ctx, tx, r.limit, r.rate.N)
		if err != nil {
			return nil, fmt.Errorf("bunqueue: queue %q: reading its RateLimit: %w", r.limit.Queue, err)
		}
		return nil, &rateWait{queue: r.limit.Queue, wait: wait}
	}
	return got, nil
}

// hold marks slots, which tx locks, as taken by holder for Per from now.
func (r *rateLimit) hold(ctx context.Context, tx bun.IDB, slots []int, holder string) error {
	if err := r.sql.Hold(ctx, tx, r.limit, slots, holder, r.rate.Per); err != nil {
		return fmt.Errorf("bunqueue: queue %q: holding slots of its RateLimit: %w", r.limit.Queue, err)
	}
	return nil
}

// tokens are the slots of a queue's RateLimit that one lock-mode batch
// took, in a transaction of their own: each item it starts uses one, and
// it gives the others back when it ends. On SQLite they are taken in the
// claim transaction, and only those used are held (holdTokens).
type tokens struct {
	r      *rateLimit
	holder string
	slots  []int
	used   int
	inTx   bool
}

// takeTokens takes up to most slots of the queue's rate limit in a
// transaction of their own, or fails with a *rateWait if none is free.
// With no rate limit it returns nil.
func (r *rateLimit) takeTokens(ctx context.Context, most int) (*tokens, error) {
	if r == nil || r.claimTx {
		return nil, nil
	}
	tk := &tokens{r: r, holder: newToken()}
	err := r.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		got, err := r.take(ctx, tx, most)
		if err != nil {
			return err
		}
		tk.slots = got
		return r.hold(ctx, tx, got, tk.holder)
	})
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// left is how many items the batch may still start; all of them with no
// rate limit.
func (tk *tokens) left(n int) int {
	if tk == nil {
		return n
	}
	return min(n, len(tk.slots)-tk.used)
}

// use notes that n items start.
func (tk *tokens) use(n int) {
	if tk != nil {
		tk.used = min(tk.used+n, len(tk.slots))
	}
}

// giveBack frees the slots that the batch did not use. A slot it fails to
// free is free when its Per has passed.
func (tk *tokens) giveBack(ctx context.Context, log *slog.Logger) {
	if tk == nil || tk.used == len(tk.slots) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := tk.r.sql.Free(ctx, tk.r.db, tk.r.limit, tk.slots[tk.used:], tk.holder); err != nil {
		log.WarnContext(ctx, "bunqueue: giving back unused slots of a RateLimit failed; they are free once their period has passed", "queue", tk.r.limit.Queue, "error", err)
	}
}

// fit cuts a batch to its tokens: with keys, the keys beyond them are
// left untried.
func (tk *tokens) fit(limit int, keys []feedKey) (int, []feedKey, []string) {
	if tk == nil {
		return limit, keys, nil
	}
	limit = tk.left(limit)
	if len(keys) <= tk.left(len(keys)) {
		return limit, keys, nil
	}
	n := tk.left(len(keys))
	untried := make([]string, 0, len(keys)-n)
	for _, k := range keys[n:] {
		untried = append(untried, k.id)
	}
	return limit, keys[:n], untried
}

// want is how many items a batch of limit rows, or of keys, may start.
func want(limit int, keys []feedKey) int {
	if keys != nil {
		return len(keys)
	}
	return limit
}

// takeKeyTokens takes in tx, for the n items that keyOf(i) describes,
// one slot of the KeyRate per item of each key, holds them for Per, and
// returns which items may start: those without a key, and as many of each
// key's as got a slot. A key left short is marked full until its next
// slot is free.
func (k *keyLimit) takeKeyTokens(ctx context.Context, tx bun.IDB, per time.Duration, n int, keyOf func(i int) (string, any, bool)) ([]bool, error) {
	need := map[string]int{}
	var order []string
	vals := map[string]any{}
	for i := range n {
		if key, val, limited := keyOf(i); limited {
			if need[key] == 0 {
				order = append(order, key)
				vals[key] = val
			}
			need[key]++
		}
	}
	holder := newToken()
	got := make(map[string]int, len(order))
	for _, key := range order {
		g, err := k.takeFor(ctx, tx, per, key, vals[key], need[key], holder)
		if err != nil {
			return nil, err
		}
		got[key] = g
	}
	run := make([]bool, n)
	for i := range n {
		key, _, limited := keyOf(i)
		run[i] = !limited || got[key] > 0
		if limited {
			got[key]--
		}
	}
	return run, nil
}

// takeFor takes and holds up to most slots of key's rate for holder, and
// returns how many it got.
func (k *keyLimit) takeFor(ctx context.Context, tx bun.IDB, per time.Duration, key string, val any, most int, holder string) (int, error) {
	if err := k.ensure(ctx, tx, key); err != nil {
		return 0, err
	}
	l := k.limit(key)
	slots, err := k.sql.Take(ctx, tx, l, k.n, most)
	if err == nil && len(slots) > 0 {
		err = k.sql.Hold(ctx, tx, l, slots, holder, per)
	}
	if err == nil && len(slots) < most {
		var wait time.Duration
		if wait, err = k.sql.NextFree(ctx, tx, l, k.n); err == nil {
			k.markFull(key, val, min(max(wait, time.Millisecond), per))
		}
	}
	if err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: taking slots of a KeyRate: %w", k.queue, err)
	}
	return len(slots), nil
}

// takeRateTokens takes the KeyRate's slots of the claimed rows, if the
// queue has a KeyRate, and leaves out of the batch the rows whose key got
// none. Where the server has row locks they are taken in a transaction of
// their own, which commits whatever becomes of the batch; on SQLite,
// whose one writer is the claim transaction, in it, and every row then
// runs in a savepoint, so that a failed handler does not undo them. The
// path ends here if no row is left.
func (b *claimTx[T]) takeRateTokens(ctx context.Context) bool {
	q, k := b.q, b.q.keyRate
	if k == nil {
		return true
	}
	keyOf := func(i int) (string, any, bool) { return q.keyOf(&b.items[i]) }
	var run []bool
	var err error
	if k.rowLocks {
		err = q.client.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) (err error) {
			run, err = k.takeKeyTokens(ctx, tx, q.cfg.KeyRate.Per, len(b.items), keyOf)
			return err
		})
	} else {
		run, err = k.takeKeyTokens(ctx, b.tx, q.cfg.KeyRate.Per, len(b.items), keyOf)
		b.keepTokens = true
	}
	if err != nil {
		b.res.err = err
		return false
	}
	return b.keep(run)
}

// takeTokensInTx takes, on SQLite, the RateLimit's slots in the claim
// transaction, which holds the database's one write lock: a transaction
// of their own before it would wait for that lock after taking them, and
// the items would start long after their slots. Every row then runs in a
// savepoint, so that a failed handler keeps them. The path ends with a
// *rateWait if none is free.
func (b *claimTx[T]) takeTokensInTx(ctx context.Context) bool {
	r := b.q.rate
	if !r.inClaim() {
		return true
	}
	slots, err := r.take(ctx, b.tx, want(b.limit, b.keys))
	if err != nil {
		b.res.err = err
		return false
	}
	b.tk = &tokens{r: r, holder: newToken(), slots: slots, inTx: true}
	b.limit, b.keys, b.res.untried = b.tk.fit(b.limit, b.keys)
	b.keepTokens = true
	return true
}

// holdTokens holds, on SQLite, one of the slots taken in the claim
// transaction per row that is to run.
func (b *claimTx[T]) holdTokens(ctx context.Context) bool {
	if b.tk == nil || !b.tk.inTx {
		return true
	}
	if err := b.tk.r.hold(ctx, b.tx, b.tk.slots[:len(b.items)], b.tk.holder); err != nil {
		b.res.err = err
		return false
	}
	return true
}

// awaitLimit waits, after a batch that found no free slot of a limit,
// before the worker looks again: until the first slot of a RateLimit is
// free again, or about slotWait for a GlobalLimit; never longer than the
// poll interval. It reports whether the client did not stop meanwhile.
func (w *worker) awaitLimit(err error) bool {
	var rw *rateWait
	if errors.As(err, &rw) {
		return w.pause(min(rw.wait+backoff.Jitter(time.Millisecond, 0.5), w.r.poll))
	}
	return w.awaitSlot()
}

// takeRateTokens takes, in the lease transaction tx, the KeyRate's slots
// of rows, if the queue has a KeyRate, and returns the rows that may be
// leased.
func (l *leaseRunner) takeRateTokens(ctx context.Context, tx bun.Tx, rows []jobRow) ([]jobRow, error) {
	k := l.jobs.keyRate
	if k == nil || len(rows) == 0 {
		return rows, nil
	}
	run, err := k.takeKeyTokens(ctx, tx, l.cfg.KeyRate.Per, len(rows), func(i int) (string, any, bool) { return l.jobs.keyOf(&rows[i]) })
	if err != nil {
		return nil, err
	}
	return keepRows(rows, run), nil
}

// splitUntried splits the rows of a batch into those it tried to claim
// and those it did not, for want of a RateLimit's slot: all of them if it
// found none.
func splitUntried(keys []feedKey, res batchResult) (tried, untried []feedKey) {
	if errors.As(res.err, new(*rateWait)) {
		return nil, keys
	}
	if len(res.untried) == 0 {
		return keys, nil
	}
	for _, k := range keys {
		if slices.Contains(res.untried, k.id) {
			untried = append(untried, k)
		} else {
			tried = append(tried, k)
		}
	}
	return tried, untried
}
