package bunqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// A queue's KeyLimit is kept with slots too (see limit.go), KeyLimit of
// them per value of its key column, created when a claim first meets the
// value. The claim transaction locks its rows first, then one slot per
// key among them, with SKIP LOCKED; a row whose key has no free slot is
// left out of the batch (it stays locked, unrun, until the transaction
// ends, and goes back to the queue). A key found full is kept out of this
// process's reads and claims for fullFor, or until a transaction of this
// process that held one of its slots ends, so that the rows of a full
// key at the head of the queue do not hide the others.

// fullFor is how long a key found full stays out of this process's reads.
const fullFor = 100 * time.Millisecond

// fullExcept is the most full keys that reads leave out; past it they
// leave out none, and claims skip the full keys' rows one by one.
const fullExcept = 100

// keyLimit is one queue's KeyLimit.
type keyLimit struct {
	queue  string
	column string // the key column, as the reads name it
	kind   slotsql.Kind
	n      int
	sql    slotsql.SQL
	db     bun.IDB // where slots are created: outside the claim transaction,
	// where the server has row locks (not SQLite)
	rowLocks bool

	mu    sync.Mutex
	known map[string]bool    // keys whose slots exist
	full  map[string]fullKey // keys found full, by slot key
}

// fullKey is a key found full: its column value, for reads to leave out,
// and until when.
type fullKey struct {
	val   any
	until time.Time
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
	keyOf := func(item *T) (string, any, bool) {
		v := f.Value(reflect.ValueOf(item).Elem())
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return "", nil, false // NULL: no limit
			}
			v = v.Elem()
		}
		val := v.Interface()
		return slotKey(fmt.Sprint(val)), val, true
	}
	return c.newKeySlots(q.name, f.Name, slotsql.Concurrency, n), keyOf, nil
}

// newKeySlots returns the n slots per key of queue's limit of kind over
// column, or nil if n is zero.
func (c *Client) newKeySlots(queue, column string, kind slotsql.Kind, n int) *keyLimit {
	if n == 0 {
		return nil
	}
	return &keyLimit{queue: queue, column: column, kind: kind, n: n, sql: slotsql.New(c.dialect), db: c.db, rowLocks: c.dialect.SkipLocked() != "",
		known: map[string]bool{}, full: map[string]fullKey{}}
}

// slotKey is the slots table's key of a key value: "k:" and the value, or
// its SHA-256 where the value would not fit the column or is not UTF-8
// text.
func slotKey(s string) string {
	if len(s) > 200 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		sum := sha256.Sum256([]byte(s))
		return "h:" + hex.EncodeToString(sum[:])
	}
	return "k:" + s
}

// limit names the slots of key.
func (k *keyLimit) limit(key string) slotsql.Limit {
	return slotsql.Limit{Queue: k.queue, Kind: k.kind, Key: key}
}

// takeKeys locks, in tx, one free slot of each of keys, creating their
// slots first where this process has not met them yet, and returns the
// slot each key got; a key that got none is marked full, with vals[key],
// its column value. Each round is one statement for all the keys still
// without one, on one slot number, from a number drawn at random (so
// that workers after the same keys try different slots first): at most
// KeyLimit rounds, one where a slot per key is all there is.
func (k *keyLimit) takeKeys(ctx context.Context, tx bun.IDB, keys []string, vals map[string]any) (map[string]int, error) {
	if err := k.ensureKeys(ctx, tx, keys); err != nil {
		return nil, err
	}
	got := make(map[string]int, len(keys))
	rest := slices.Clone(keys) // keys are the caller's
	first := rand.IntN(k.n)
	for i := 0; i < k.n && len(rest) > 0; i++ {
		slot := (first + i) % k.n
		taken, err := k.sql.TakeKeys(ctx, tx, k.queue, k.kind, rest, slot)
		if err != nil {
			return nil, fmt.Errorf("bunqueue: queue %q: taking slots of a KeyLimit: %w", k.queue, err)
		}
		for _, key := range taken {
			got[key] = slot
		}
		rest = slices.DeleteFunc(rest, func(key string) bool { _, ok := got[key]; return ok })
	}
	for _, key := range rest {
		k.markFull(key, vals[key], fullFor)
	}
	return got, nil
}

// ensureKeys creates the slots of those of keys that this process has not
// met yet, in two statements for them all (see ensure).
func (k *keyLimit) ensureKeys(ctx context.Context, tx bun.IDB, keys []string) error {
	k.mu.Lock()
	var unknown []string
	for _, key := range keys {
		if !k.known[key] {
			unknown = append(unknown, key)
		}
	}
	k.mu.Unlock()
	if len(unknown) == 0 {
		return nil
	}
	db := k.db
	if !k.rowLocks {
		db = tx
	}
	if err := k.sql.EnsureKeys(ctx, db, k.queue, k.kind, unknown, k.n); err != nil {
		return fmt.Errorf("bunqueue: queue %q: creating the slots of a per-key limit: %w", k.queue, err)
	}
	k.noteKnown(unknown...)
	return nil
}

// noteKnown notes that the slots of keys exist.
func (k *keyLimit) noteKnown(keys ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.known)+len(keys) > 100_000 {
		clear(k.known) // bounded: a key met again is ensured again
	}
	for _, key := range keys {
		k.known[key] = true
	}
}

// ensure creates the slots of key if this process has not met it yet.
func (k *keyLimit) ensure(ctx context.Context, tx bun.IDB, key string) error {
	k.mu.Lock()
	known := k.known[key]
	k.mu.Unlock()
	if known {
		return nil
	}
	// On the pool, in a statement of its own: an INSERT in the claim
	// transaction would wait for a transaction that inserts the same
	// slot, and hold its locks while it waits. Not on SQLite, whose
	// one writer is the claim transaction.
	db := k.db
	if !k.rowLocks {
		db = tx
	}
	if err := k.sql.Ensure(ctx, db, k.limit(key), k.n); err != nil {
		return fmt.Errorf("bunqueue: queue %q: creating the slots of a per-key limit: %w", k.queue, err)
	}
	k.noteKnown(key)
	return nil
}

// markFull keeps key, whose column value is val, out of this process's
// reads for d.
func (k *keyLimit) markFull(key string, val any, d time.Duration) {
	k.mu.Lock()
	k.full[key] = fullKey{val: val, until: time.Now().Add(d)}
	k.mu.Unlock()
}

// freed notes that a transaction of this process that held a slot of
// each of keys ended: they have a free slot, for a moment at least.
func (k *keyLimit) freed(keys []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		delete(k.full, key)
	}
}

// check fails if the slots table is missing, at Start.
func (k *keyLimit) check(ctx context.Context, c *Client) error {
	if k == nil {
		return nil
	}
	if err := slotsql.CheckTable(ctx, c.db); err != nil {
		if c.dialect.MissingTable(err) {
			return fmt.Errorf("bunqueue: queue %q: its per-key limits need the %s table of schema version 6: run bunqueue.Migrate (or apply bunqueue.MigrationSQL): %w",
				k.queue, slotsql.Slots, err)
		}
		return fmt.Errorf("bunqueue: queue %q: %w", k.queue, err)
	}
	return nil
}

// except returns the column values of the keys found full, for reads to
// leave out; none if there are more than fullExcept.
func (k *keyLimit) except(now time.Time) []any {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var vals []any
	for key, f := range k.full {
		if now.After(f.until) {
			delete(k.full, key)
			continue
		}
		vals = append(vals, f.val)
	}
	if len(vals) > fullExcept {
		return nil
	}
	return vals
}

// excludeFull leaves the rows of the keys found full (no free slot of
// the KeyLimit, no token of the KeyRate) out of sel, a read or a claim of
// q.
func (q *Queue[T]) excludeFull(sel *bun.SelectQuery, now time.Time) *bun.SelectQuery {
	k := q.keyLimit
	if k == nil {
		k = q.keyRate
	}
	if k == nil {
		return sel
	}
	vals := append(q.keyLimit.except(now), q.keyRate.except(now)...)
	if len(vals) == 0 || len(vals) > fullExcept {
		return sel
	}
	return sel.Where("(?TableAlias.? IS NULL OR ?TableAlias.? NOT IN (?))", bun.Ident(k.column), bun.Ident(k.column), bun.List(vals))
}

// slotsPerKey takes, in tx, one slot per key among the n items that
// keyOf(i) describes, and returns which items may run: those without a
// key, and those whose key got a slot; the items of one key share it.
func slotsPerKey(ctx context.Context, k *keyLimit, tx bun.IDB, n int, keyOf func(i int) (string, any, bool)) (run []bool, held []heldSlot, err error) {
	var keys []string
	vals := map[string]any{}
	for i := range n {
		if key, val, limited := keyOf(i); limited {
			if _, seen := vals[key]; !seen {
				keys = append(keys, key)
				vals[key] = val
			}
		}
	}
	var got map[string]int
	if len(keys) > 0 {
		if got, err = k.takeKeys(ctx, tx, keys, vals); err != nil {
			return nil, nil, err
		}
	}
	for _, key := range keys {
		if slot, ok := got[key]; ok {
			held = append(held, heldSlot{k.limit(key), slot})
		}
	}
	run = make([]bool, n)
	for i := range n {
		key, _, limited := keyOf(i)
		_, ok := got[key]
		run[i] = !limited || ok
	}
	return run, held, nil
}

// takeKeySlots locks one slot per key among the claimed rows, if the
// queue has a KeyLimit, and leaves out of the batch the rows whose key
// has no free slot. The path ends here if none is left.
func (b *claimTx[T]) takeKeySlots(ctx context.Context) bool {
	q := b.q
	if q.keyLimit == nil {
		return true
	}
	run, held, err := slotsPerKey(ctx, q.keyLimit, b.tx, len(b.items), func(i int) (string, any, bool) { return q.keyOf(&b.items[i]) })
	if err != nil {
		b.res.err = err
		return false
	}
	for _, h := range held {
		b.keySlots = append(b.keySlots, h.limit.Key)
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
			b.items[n], b.held[n], b.res.got[n] = b.items[i], b.held[i], b.res.got[i]
			n++
		}
	}
	b.res.leftOut += len(b.items) - n
	b.items, b.held, b.res.got = b.items[:n], b.held[:n], b.res.got[:n]
	return n > 0
}

// takeKeySlots takes, in the lease transaction tx, one slot per key among
// rows, and returns the rows that may be leased, and the slots to lease
// with them.
func (l *leaseRunner) takeKeySlots(ctx context.Context, tx bun.Tx, rows []jobRow) ([]jobRow, []heldSlot, error) {
	run, held, err := slotsPerKey(ctx, l.jobs.keyLimit, tx, len(rows), func(i int) (string, any, bool) { return l.jobs.keyOf(&rows[i]) })
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
