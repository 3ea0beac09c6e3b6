// Package slotsql_test runs the statements of internal/slotsql on every
// server: the slots of per-key limits, created and taken for many keys in
// one statement.
package slotsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"

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
