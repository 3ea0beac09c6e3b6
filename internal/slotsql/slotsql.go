// Package slotsql holds the statements on the slots table, which keeps
// the global concurrency limits of queues across processes.
//
// A queue limited to n items at once has the slots 0 to n-1. A worker
// in lock mode holds a slot by locking its row in the claim transaction:
// the slot is free again when that transaction ends, by commit or
// rollback, and when the server ends the session of a process that died.
// A worker in lease mode holds one by writing its lease's token and end
// in the row, and frees it when its batch ends or when the lease runs
// out unextended.
package slotsql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Slots is the slots table's name.
const Slots = migrate.SlotsTable

// SQL is the statements on the slots table of one kind of server.
type SQL struct{ d sqldialect.Dialect }

// New returns the statements of d's server.
func New(d sqldialect.Dialect) SQL { return SQL{d: d} }

// Ensure creates the slots 0 to n-1 of queue's key that do not exist.
// Processes that start together may insert the same slot: the one that
// comes second skips it.
func (s SQL) Ensure(ctx context.Context, db bun.IDB, queue, key string, n int) error {
	var have []int
	if err := db.NewRaw("SELECT slot FROM "+Slots+" WHERE queue = ? AND slot_key = ? AND slot < ?", queue, key, n).Scan(ctx, &have); err != nil {
		return err
	}
	there := make(map[int]bool, len(have))
	for _, slot := range have {
		there[slot] = true
	}
	for slot := range n {
		if there[slot] {
			continue
		}
		_, err := db.NewRaw("INSERT INTO "+Slots+" (queue, slot_key, slot) VALUES (?, ?, ?)"+s.d.SkipTakenKeys(), queue, key, slot).Exec(ctx)
		if err != nil && !s.d.KeyTaken(err, "PRIMARY") {
			return err
		}
	}
	return nil
}

// Take locks, in tx, one free slot below n of queue's key, skipping the
// slots other transactions lock, and returns it; -1 if every slot is
// locked or held. A slot is free when no lease holds it: its held_until
// is NULL or past, by the database clock.
//
// The order is by slot alone: MariaDB 10.11, ordering by the whole key
// (a filesort, to its optimizer), skipped every row once one was locked.
func (s SQL) Take(ctx context.Context, tx bun.IDB, queue, key string, n int) (int, error) {
	query := "SELECT slot FROM " + Slots + " WHERE queue = ? AND slot_key = ? AND slot < ? AND (held_until IS NULL OR held_until < " + s.d.Now() +
		") ORDER BY slot LIMIT 1"
	if lock := s.d.SkipLocked(); lock != "" {
		query += " FOR " + lock
	}
	var slot int
	err := tx.NewRaw(query, queue, key, n).Scan(ctx, &slot)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return slot, err
}

// Hold marks slot, which tx locks, as held by token for lease from now,
// by the database clock.
func (s SQL) Hold(ctx context.Context, tx bun.IDB, queue, key string, slot int, token string, lease time.Duration) error {
	_, err := tx.NewRaw("UPDATE "+Slots+" SET holder = ?, held_until = "+s.d.NowPlus(lease)+" WHERE queue = ? AND slot_key = ? AND slot = ?",
		token, queue, key, slot).Exec(ctx)
	return err
}

// Extend pushes the end of token's hold on slot to lease from now, and
// reports whether token still held it.
func (s SQL) Extend(ctx context.Context, db bun.IDB, queue, key string, slot int, token string, lease time.Duration) (bool, error) {
	r, err := db.NewRaw("UPDATE "+Slots+" SET held_until = "+s.d.NowPlus(lease)+" WHERE queue = ? AND slot_key = ? AND slot = ? AND holder = ?",
		queue, key, slot, token).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// Free gives slot back, if token still holds it.
func (s SQL) Free(ctx context.Context, db bun.IDB, queue, key string, slot int, token string) error {
	_, err := db.NewRaw("UPDATE "+Slots+" SET holder = NULL, held_until = NULL WHERE queue = ? AND slot_key = ? AND slot = ? AND holder = ?",
		queue, key, slot, token).Exec(ctx)
	return err
}
