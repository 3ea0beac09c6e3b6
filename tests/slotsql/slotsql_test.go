// Package slotsql_test runs the statements of internal/slotsql on every
// server: the slots of per-key limits, created and taken for many keys in
// one statement, and rate slots taken ahead of their hold's end.
package slotsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// onServers runs test on MariaDB (or MySQL) and PostgreSQL, which have
// row locks to skip, in parallel.
func onServers(t *testing.T, test func(t *testing.T, db *bun.DB, d sqldialect.Dialect)) {
	t.Parallel()
	for _, srv := range dbtest.Servers() {
		if srv.Name == "sqlite" {
			continue // one writer: nothing to skip
		}
		t.Run(srv.Name, func(t *testing.T) {
			t.Parallel()
			db := srv.Open(t, 0)
			require.NoError(t, bunqueue.Migrate(t.Context(), db))
			d, err := sqldialect.For(db)
			require.NoError(t, err)
			test(t, db, d)
		})
	}
}

// keys returns n keys, each met once.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k:%d", i)
	}
	return out
}

// EnsureKeys creates the slots of many keys at once, only those missing,
// and again without error (also when another process created some of
// them between its read and its insert, as two pools do here at once).
func TestEnsureKeys(t *testing.T) {
	onServers(t, func(t *testing.T, db *bun.DB, d sqldialect.Dialect) {
		ctx := t.Context()
		queue := dbtest.Name("t_slots")
		t.Cleanup(func() {
			_, _ = db.NewRaw("DELETE FROM "+tables.Default.Slots+" WHERE queue = ?", queue).Exec(context.Background())
		})
		s := slotsql.New(d, tables.Default)
		require.NoError(t, s.Ensure(ctx, db, slotsql.Limit{Queue: queue, Key: "k:3"}, 2), "one key's slots first")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = s.EnsureKeys(ctx, db, queue, slotsql.Concurrency, keys(20), 2) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		var n int
		require.NoError(t, db.NewRaw("SELECT COUNT(*) FROM "+tables.Default.Slots+" WHERE queue = ?", queue).Scan(ctx, &n))
		require.Equal(t, 40, n, "two slots of each of 20 keys, once")
	})
}

// TakeKeys locks one slot number of many keys in one statement, skipping
// the rows another transaction locks and the slots a lease holds, and
// never waits for a lock.
func TestTakeKeys(t *testing.T) {
	onServers(t, func(t *testing.T, db *bun.DB, d sqldialect.Dialect) {
		ctx := t.Context()
		queue := dbtest.Name("t_slots")
		t.Cleanup(func() {
			_, _ = db.NewRaw("DELETE FROM "+tables.Default.Slots+" WHERE queue = ?", queue).Exec(context.Background())
		})
		s := slotsql.New(d, tables.Default)
		all := keys(30)
		require.NoError(t, s.EnsureKeys(ctx, db, queue, slotsql.Concurrency, all, 2))
		// Slot 0 of k:5 is held by a lease; slot 0 of k:7 and k:8 and slot
		// 1 of k:9 are locked by another transaction.
		_, err := db.NewRaw("UPDATE "+tables.Default.Slots+" SET holder = 'x', held_until = "+d.NowPlus(60_000_000_000)+
			" WHERE queue = ? AND slot_key = 'k:5' AND slot = 0", queue).Exec(ctx)
		require.NoError(t, err)
		other, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { _ = other.Rollback() }()
		locked, err := s.TakeKeys(ctx, other, queue, slotsql.Concurrency, []string{"k:7", "k:8"}, 0)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"k:7", "k:8"}, locked)
		locked, err = s.TakeKeys(ctx, other, queue, slotsql.Concurrency, []string{"k:9"}, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"k:9"}, locked)

		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		got, err := s.TakeKeys(ctx, tx, queue, slotsql.Concurrency, all, 0)
		require.NoError(t, err)
		want := slices.DeleteFunc(slices.Clone(all), func(k string) bool { return k == "k:5" || k == "k:7" || k == "k:8" })
		require.ElementsMatch(t, want, got, "every key's slot 0 but the held and the locked ones")
		got, err = s.TakeKeys(ctx, tx, queue, slotsql.Concurrency, []string{"k:5", "k:7", "k:8", "k:9"}, 1)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"k:5", "k:7", "k:8"}, got, "their slot 1, but k:9's, which the other locks")
		got, err = s.TakeKeys(ctx, tx, queue, slotsql.Concurrency, []string{"k:404"}, 0)
		require.NoError(t, err)
		require.Empty(t, got, "a key without slots")
	})
}

// TakeAhead takes the free rate slots and those whose hold ends within
// its lead, each with how long its hold still runs, skipping the slots
// held longer and those another transaction locks; with no lead it
// takes the free ones alone.
func TestTakeAhead(t *testing.T) {
	onServers(t, func(t *testing.T, db *bun.DB, d sqldialect.Dialect) {
		ctx := t.Context()
		queue := dbtest.Name("t_slots")
		t.Cleanup(func() {
			_, _ = db.NewRaw("DELETE FROM "+tables.Default.Slots+" WHERE queue = ?", queue).Exec(context.Background())
		})
		s := slotsql.New(d, tables.Default)
		l := slotsql.Limit{Queue: queue, Kind: slotsql.Rate}
		require.NoError(t, s.Ensure(ctx, db, l, 6))
		// Slot 0 is free; 1 is held for a minute, 2 for 5 s, 4 for 1 s and
		// locked by another transaction; 3's hold ended a second ago; 5 is
		// beyond the n of 5.
		set := func(slot int, until time.Duration) {
			_, err := db.NewRaw("UPDATE "+tables.Default.Slots+" SET holder = 'x', held_until = "+d.NowPlus(until)+
				" WHERE queue = ? AND kind = ? AND slot = ?", queue, int(slotsql.Rate), slot).Exec(ctx)
			require.NoError(t, err)
		}
		set(1, time.Minute)
		set(3, -time.Second)
		set(4, time.Second)
		before := time.Now()
		set(2, 5*time.Second)
		other, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { _ = other.Rollback() }()
		locked, err := s.TakeAhead(ctx, other, l, 5, 1, 0)
		require.NoError(t, err)
		require.Equal(t, []slotsql.Ahead{{Slot: 0}}, locked)
		_, err = other.NewRaw("SELECT slot FROM "+tables.Default.Slots+" WHERE queue = ? AND kind = ? AND slot = 4 FOR UPDATE", queue, int(slotsql.Rate)).Exec(ctx)
		require.NoError(t, err)

		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		got, err := s.TakeAhead(ctx, tx, l, 5, 10, 0)
		require.NoError(t, err)
		require.Equal(t, []slotsql.Ahead{{Slot: 3}}, got, "no lead: the free ones, but 0, which the other locks")
		got, err = s.TakeAhead(ctx, tx, l, 5, 10, 10*time.Second)
		took := time.Since(before)
		require.NoError(t, err)
		require.Len(t, got, 2, "%v", got)
		require.Equal(t, 2, got[0].Slot, "held for 5 s, within the lead of 10 s")
		require.LessOrEqual(t, got[0].Wait, 5*time.Second)
		require.GreaterOrEqual(t, got[0].Wait, 5*time.Second-took-time.Microsecond, "to the microsecond")
		require.Equal(t, slotsql.Ahead{Slot: 3}, got[1], "taken by tx already: its lock is tx's")
	})
}
