package limit

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// ensureKeys creates the slots of those of keys that this process has not
// met yet, in two statements for them all (see ensure).
func (k *Keys) ensureKeys(ctx context.Context, tx bun.IDB, keys []string) error {
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
func (k *Keys) noteKnown(keys ...string) {
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
func (k *Keys) ensure(ctx context.Context, tx bun.IDB, key string) error {
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
func (k *Keys) markFull(key string, val any, d time.Duration) {
	k.mu.Lock()
	k.full[key] = fullKey{val: val, until: time.Now().Add(d)}
	k.mu.Unlock()
}

// Freed notes that a transaction of this process that held a slot of
// each of keys ended: they have a free slot, for a moment at least.
func (k *Keys) Freed(keys []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		delete(k.full, key)
	}
}

// Except returns the column values of the keys found full, for reads to
// leave out; none if there are more than FullExcept.
func (k *Keys) Except(now time.Time) []any {
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
	if len(vals) > FullExcept {
		return nil
	}
	return vals
}
