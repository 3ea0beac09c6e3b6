package limit

import (
	"context"
	"crypto/sha256"
	"database/sql"
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

	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// A queue's KeyLimit is kept with slots too, KeyLimit of them per value
// of its key column, created when a claim first meets the value. The
// claim transaction locks its rows first, then one slot per key among
// them, with SKIP LOCKED; a row whose key has no free slot is left out of
// the batch (it stays locked, unrun, until the transaction ends, and
// goes back to the queue). A key found full is kept out of this
// process's reads and claims for fullFor, or until a transaction of this
// process that held one of its slots ends, so that the rows of a full
// key at the head of the queue do not hide the others. A KeyRate is kept
// the same way, with rate slots per key.

// fullFor is how long a key found full stays out of this process's reads.
const fullFor = 100 * time.Millisecond

// FullExcept is the most full keys that reads leave out; past it they
// leave out none, and claims skip the full keys' rows one by one.
const FullExcept = 100

// Keys is one queue's KeyLimit or KeyRate: n slots of a kind per key.
type Keys struct {
	queue string
	kind  slotsql.Kind
	n     int
	sql   slotsql.SQL
	d     sqldialect.Dialect
	db    bun.IDB // where slots are created: outside the claim transaction,
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

// KeyOf describes the i-th item of a batch: its slot key (SlotKey), its
// key column's value, and whether the limit applies to it (its key is not
// NULL).
type KeyOf func(i int) (key string, val any, limited bool)

// NewKeys returns queue's n slots of kind per key, on db.
func NewKeys(d sqldialect.Dialect, t tables.Names, db bun.IDB, queue string, kind slotsql.Kind, n int) *Keys {
	return &Keys{queue: queue, kind: kind, n: n, sql: slotsql.New(d, t), d: d, db: db, rowLocks: d.SkipLocked() != "",
		known: map[string]bool{}, full: map[string]fullKey{}}
}

// FieldKey returns the key of an item whose key column holds v: its slot
// key, its value, and whether the limit applies (not where v is a nil
// pointer: NULL).
func FieldKey(v reflect.Value) (string, any, bool) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "", nil, false // NULL: no limit
		}
		v = v.Elem()
	}
	val := v.Interface()
	return SlotKey(fmt.Sprint(val)), val, true
}

// SlotKey is the slots table's key of a key value: "k:" and the value, or
// its SHA-256 where the value would not fit the column or is not UTF-8
// text.
func SlotKey(s string) string {
	if len(s) > 200 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		sum := sha256.Sum256([]byte(s))
		return "h:" + hex.EncodeToString(sum[:])
	}
	return "k:" + s
}

// limit names the slots of key.
func (k *Keys) limit(key string) slotsql.Limit {
	return slotsql.Limit{Queue: k.queue, Kind: k.kind, Key: key}
}

// Check fails if the slots table is missing, at Start.
func (k *Keys) Check(ctx context.Context) error {
	if err := k.sql.CheckTable(ctx, k.db); err != nil {
		if k.d.MissingTable(err) {
			return fmt.Errorf("bunqueue: queue %q: its per-key limits need the %s table of schema version 6: run bunqueue.Migrate (or apply bunqueue.MigrationSQL): %w",
				k.queue, k.sql.Table(), err)
		}
		return fmt.Errorf("bunqueue: queue %q: %w", k.queue, err)
	}
	return nil
}

// TakeSlots takes, in tx, one slot per key among the n items that
// keyOf(i) describes, and returns which items may run: those without a
// key, and those whose key got a slot; the items of one key share it.
func (k *Keys) TakeSlots(ctx context.Context, tx bun.IDB, n int, keyOf KeyOf) (run []bool, held []Held, err error) {
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
			held = append(held, Held{k.limit(key), slot})
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

// takeKeys locks, in tx, one free slot of each of keys, creating their
// slots first where this process has not met them yet, and returns the
// slot each key got; a key that got none is marked full, with vals[key],
// its column value. Each round is one statement for all the keys still
// without one, on one slot number, from a number drawn at random (so
// that workers after the same keys try different slots first): at most
// KeyLimit rounds, one where a slot per key is all there is.
func (k *Keys) takeKeys(ctx context.Context, tx bun.IDB, keys []string, vals map[string]any) (map[string]int, error) {
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

// TakeTokens takes in tx, for the n items that keyOf(i) describes, one
// rate slot per item of each key, holds them for per (and its grace),
// and returns which items may start: those without a key, and as many of
// each key's as got a slot, with the cover each is to start under (nil
// for an item without a key; see Cover.Start). A key left short is
// marked full until its next slot is free.
func (k *Keys) TakeTokens(ctx context.Context, tx bun.IDB, per time.Duration, n int, keyOf KeyOf) ([]bool, []*Cover, error) {
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
	holder, took := NewToken(), time.Now()
	got := make(map[string][]int, len(order))
	for _, key := range order {
		slots, err := k.takeFor(ctx, tx, per, key, vals[key], need[key], holder)
		if err != nil {
			return nil, nil, err
		}
		got[key] = slots
	}
	run := make([]bool, n)
	covers := make([]*Cover, n)
	for i := range n {
		key, _, limited := keyOf(i)
		if !limited {
			run[i] = true
			continue
		}
		if slots := got[key]; len(slots) > 0 {
			run[i] = true
			covers[i] = &Cover{sql: k.sql, limit: k.limit(key), slot: slots[0], holder: holder, per: per, took: took}
			got[key] = slots[1:]
		}
	}
	return run, covers, nil
}

// TakeTokensForClaim takes the tokens of TakeTokens for a lock-mode
// claim. Where the server has row locks they are taken in a transaction
// of their own, which commits whatever becomes of the batch; on SQLite,
// whose one writer is the claim transaction tx, in it: inTx says so, and
// every row must then run in a savepoint, so that a failed handler does
// not undo them.
func (k *Keys) TakeTokensForClaim(ctx context.Context, tx bun.IDB, per time.Duration, n int, keyOf KeyOf) (run []bool, covers []*Cover, inTx bool, err error) {
	if !k.rowLocks {
		run, covers, err = k.TakeTokens(ctx, tx, per, n, keyOf)
		return run, covers, true, err
	}
	err = k.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) (err error) {
		run, covers, err = k.TakeTokens(ctx, tx, per, n, keyOf)
		return err
	})
	return run, covers, false, err
}

// takeFor takes and holds up to most slots of key's rate for holder, and
// returns them.
func (k *Keys) takeFor(ctx context.Context, tx bun.IDB, per time.Duration, key string, val any, most int, holder string) ([]int, error) {
	if err := k.ensure(ctx, tx, key); err != nil {
		return nil, err
	}
	l := k.limit(key)
	slots, err := k.sql.Take(ctx, tx, l, k.n, most)
	if err == nil && len(slots) > 0 {
		err = k.sql.Hold(ctx, tx, l, slots, holder, per+Grace(per))
	}
	if err == nil && len(slots) < most {
		var wait time.Duration
		if wait, err = k.sql.NextFree(ctx, tx, l, k.n); err == nil {
			k.markFull(key, val, min(max(wait, time.Millisecond), per))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bunqueue: queue %q: taking slots of a KeyRate: %w", k.queue, err)
	}
	return slots, nil
}
