// Package slotsql holds the statements on the slots table, which keeps
// the concurrency limits and rate limits of queues across processes.
//
// A queue limited to n items at once has the slots 0 to n-1. A worker
// in lock mode holds a slot by locking its row in the claim transaction:
// the slot is free again when that transaction ends, by commit or
// rollback, and when the server ends the session of a process that died.
// A worker in lease mode holds one by writing its lease's token and end
// in the row, and frees it when its batch ends or when the lease runs
// out unextended.
//
// A queue limited to n starts per period has n slots of kind Rate: a
// start takes a free one and holds it (held_until) until the period has
// passed, by the database clock, in a transaction that commits whatever
// becomes of the item. It may take one a moment before its hold ends
// (TakeAhead), and start once it has.
package slotsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// Kind tells the limits of a queue apart: each has slots of its own.
type Kind int

// The kinds of slots.
const (
	// Concurrency slots are held while an item runs.
	Concurrency Kind = 0
	// Rate slots are held for a period from each start.
	Rate Kind = 1
)

// Limit names the slots of one limit: a queue's, of a kind, for a key
// ("" for the whole queue).
type Limit struct {
	Queue string
	Kind  Kind
	Key   string
}

// where is the WHERE clause of l's slots, and its arguments.
func (l Limit) where() (string, []any) {
	return "queue = ? AND kind = ? AND slot_key = ?", []any{l.Queue, int(l.Kind), l.Key}
}

// CheckTable fails, through db, if the slots table is missing (a
// dialect's MissingTable tells that error apart). It reads no row.
func (s SQL) CheckTable(ctx context.Context, db bun.IDB) error {
	var n int
	return db.NewRaw("SELECT COUNT(*) FROM "+s.t.Slots+" WHERE 1 = 0").Scan(ctx, &n)
}

// SQL is the statements on the slots table of one kind of server.
type SQL struct {
	d sqldialect.Dialect
	t tables.Names
}

// New returns the statements of d's server on the slots table of t.
func New(d sqldialect.Dialect, t tables.Names) SQL { return SQL{d: d, t: t} }

// Table is the slots table's name.
func (s SQL) Table() string { return s.t.Slots }

// Ensure creates the slots 0 to n-1 of l that do not exist. Processes
// that start together may insert the same slot: the one that comes second
// skips it.
func (s SQL) Ensure(ctx context.Context, db bun.IDB, l Limit, n int) error {
	where, args := l.where()
	var have []int
	if err := db.NewRaw("SELECT slot FROM "+s.t.Slots+" WHERE "+where+" AND slot < ?", append(args, n)...).Scan(ctx, &have); err != nil {
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
		_, err := db.NewRaw("INSERT INTO "+s.t.Slots+" (queue, kind, slot_key, slot) VALUES (?, ?, ?, ?)"+s.d.SkipTakenKeys(),
			l.Queue, int(l.Kind), l.Key, slot).Exec(ctx)
		if err != nil && !s.d.KeyTaken(err, "PRIMARY") {
			return err
		}
	}
	return nil
}

// EnsureKeys creates, for each of keys, the slots 0 to n-1 of the limit
// of queue's kind for that key that do not exist: one read, and one
// INSERT of the rows missing. Where another process inserted one of them
// meanwhile (MySQL and MariaDB, whose INSERT cannot skip a taken key
// without turning every error into a warning), the rows are inserted one
// by one, each skipping a taken key.
func (s SQL) EnsureKeys(ctx context.Context, db bun.IDB, queue string, kind Kind, keys []string, n int) error {
	var have []struct {
		Key  string `bun:"slot_key"`
		Slot int    `bun:"slot"`
	}
	if err := db.NewRaw("SELECT slot_key, slot FROM "+s.t.Slots+" WHERE queue = ? AND kind = ? AND slot_key IN (?) AND slot < ?",
		queue, int(kind), bun.List(keys), n).Scan(ctx, &have); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	there := make(map[Limit]map[int]bool, len(keys))
	for _, h := range have {
		l := Limit{Queue: queue, Kind: kind, Key: h.Key}
		if there[l] == nil {
			there[l] = map[int]bool{}
		}
		there[l][h.Slot] = true
	}
	var rows []string
	var args []any
	for _, key := range keys {
		for slot := range n {
			if !there[Limit{Queue: queue, Kind: kind, Key: key}][slot] {
				rows = append(rows, "(?, ?, ?, ?)")
				args = append(args, queue, int(kind), key, slot)
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	_, err := db.NewRaw("INSERT INTO "+s.t.Slots+" (queue, kind, slot_key, slot) VALUES "+strings.Join(rows, ", ")+s.d.SkipTakenKeys(), args...).Exec(ctx)
	if err != nil && s.d.KeyTaken(err, "PRIMARY") {
		for _, key := range keys {
			if err := s.Ensure(ctx, db, Limit{Queue: queue, Kind: kind, Key: key}, n); err != nil {
				return err
			}
		}
		return nil
	}
	return err
}

// TakeKeys locks, in tx, the slot numbered slot of each of keys of the
// limits of queue's kind, where it is free, skipping those other
// transactions lock, and returns the keys whose slot it locked: one
// statement for all of them. Each (key, slot) is one row of the primary
// key, read by its value, with no ORDER BY to sort them (see Take).
func (s SQL) TakeKeys(ctx context.Context, tx bun.IDB, queue string, kind Kind, keys []string, slot int) ([]string, error) {
	query := "SELECT slot_key FROM " + s.t.Slots + " WHERE queue = ? AND kind = ? AND slot_key IN (?) AND slot = ? AND (held_until IS NULL OR held_until < " + s.d.Now() + ")"
	if lock := s.d.SkipLocked(); lock != "" {
		query += " FOR " + lock
	}
	var got []string
	err := tx.NewRaw(query, queue, int(kind), bun.List(keys), slot).Scan(ctx, &got)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return got, err
}

// Take locks, in tx, up to most free slots below n of l, skipping the
// slots other transactions lock, and returns them; none if every slot is
// locked or held. A slot is free when no lease holds it: its held_until
// is NULL or past, by the database clock.
//
// The order is by slot alone: MariaDB 10.11, ordering by the whole key
// (a filesort, to its optimizer), skipped every row once one was locked.
func (s SQL) Take(ctx context.Context, tx bun.IDB, l Limit, n, most int) ([]int, error) {
	where, args := l.where()
	query := "SELECT slot FROM " + s.t.Slots + " WHERE " + where + " AND slot < ? AND (held_until IS NULL OR held_until < " + s.d.Now() +
		") ORDER BY slot LIMIT ?"
	if lock := s.d.SkipLocked(); lock != "" {
		query += " FOR " + lock
	}
	var slots []int
	err := tx.NewRaw(query, append(args, n, most)...).Scan(ctx, &slots)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return slots, err
}

// Ahead is a slot that TakeAhead locked: its number, and how long its
// last hold still ran when the statement began, by the database clock
// (zero if it had ended).
type Ahead struct {
	Slot int
	Wait time.Duration
}

// TakeAhead is Take for rate slots, where a slot whose hold ends within
// lead of now may be taken too: it returns the slots with how long each
// hold still runs, which the caller waits out before it starts an item
// under the slot. With lead zero it takes what Take takes; the order
// is by slot, as Take's.
func (s SQL) TakeAhead(ctx context.Context, tx bun.IDB, l Limit, n, most int, lead time.Duration) ([]Ahead, error) {
	where, args := l.where()
	query := "SELECT slot, -(" + s.d.MicrosSince("held_until") + ") AS wait_us FROM " + s.t.Slots + " WHERE " + where +
		" AND slot < ? AND (held_until IS NULL OR held_until < " + s.d.NowPlus(lead) + ") ORDER BY slot LIMIT ?"
	if lock := s.d.SkipLocked(); lock != "" {
		query += " FOR " + lock
	}
	var rows []struct {
		Slot   int    `bun:"slot"`
		WaitUS *int64 `bun:"wait_us"`
	}
	err := tx.NewRaw(query, append(args, n, most)...).Scan(ctx, &rows)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	got := make([]Ahead, len(rows))
	for i, r := range rows {
		got[i].Slot = r.Slot
		if r.WaitUS != nil && *r.WaitUS > 0 {
			got[i].Wait = time.Duration(*r.WaitUS) * time.Microsecond
		}
	}
	return got, err
}

// Hold marks the slots of l, which tx locks, as held by token for lease
// from now, by the database clock.
func (s SQL) Hold(ctx context.Context, tx bun.IDB, l Limit, slots []int, token string, lease time.Duration) error {
	where, args := l.where()
	_, err := tx.NewRaw("UPDATE "+s.t.Slots+" SET holder = ?, held_until = "+s.d.NowPlus(lease)+" WHERE "+where+" AND slot IN (?)",
		append(append([]any{token}, args...), bun.List(slots))...).Exec(ctx)
	return err
}

// Extend pushes the end of token's hold on the slots of l to lease from
// now, and returns how many token still held.
func (s SQL) Extend(ctx context.Context, db bun.IDB, l Limit, slots []int, token string, lease time.Duration) (int64, error) {
	where, args := l.where()
	r, err := db.NewRaw("UPDATE "+s.t.Slots+" SET held_until = "+s.d.NowPlus(lease)+" WHERE "+where+" AND slot IN (?) AND holder = ?",
		append(args, bun.List(slots), token)...).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// Free gives the slots of l back, those token still holds.
func (s SQL) Free(ctx context.Context, db bun.IDB, l Limit, slots []int, token string) error {
	where, args := l.where()
	_, err := db.NewRaw("UPDATE "+s.t.Slots+" SET holder = NULL, held_until = NULL WHERE "+where+" AND slot IN (?) AND holder = ?",
		append(args, bun.List(slots), token)...).Exec(ctx)
	return err
}

// Settle ends token's holds on the slots of l: each slot of until is
// held from now for its duration (which may be negative: free already),
// and the slots of free are given back; a slot token no longer holds is
// left alone. One statement.
func (s SQL) Settle(ctx context.Context, db bun.IDB, l Limit, token string, until map[int]time.Duration, free []int) error {
	if len(until) == 0 {
		if len(free) == 0 {
			return nil
		}
		return s.Free(ctx, db, l, free, token)
	}
	held := slices.Sorted(maps.Keys(until))
	var b strings.Builder
	b.WriteString("UPDATE " + s.t.Slots + " SET holder = CASE WHEN slot IN (?) THEN holder ELSE NULL END, held_until = CASE slot")
	for _, slot := range held {
		fmt.Fprintf(&b, " WHEN %d THEN %s", slot, s.d.NowPlus(until[slot]))
	}
	where, args := l.where()
	b.WriteString(" ELSE NULL END WHERE " + where + " AND slot IN (?) AND holder = ?")
	_, err := db.NewRaw(b.String(), append(append([]any{bun.List(held)}, args...), bun.List(append(held, free...)), token)...).Exec(ctx)
	return err
}

// NextFree returns how long until the first of the slots below n of l
// that a hold keeps is free again, by the database clock; zero if one is
// free already (or none exists).
func (s SQL) NextFree(ctx context.Context, db bun.IDB, l Limit, n int) (time.Duration, error) {
	where, args := l.where()
	var row struct {
		Until *time.Time `bun:"until_"`
		Now   time.Time  `bun:"now_"`
	}
	err := db.NewRaw("SELECT MIN(held_until) AS until_, "+s.d.Now()+" AS now_ FROM "+s.t.Slots+" WHERE "+where+" AND slot < ?",
		append(args, n)...).Scan(ctx, &row)
	if err != nil || row.Until == nil {
		return 0, err
	}
	return max(row.Until.Sub(row.Now), 0), nil
}
