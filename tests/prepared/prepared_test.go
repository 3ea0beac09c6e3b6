package prepared_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/prepared"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// servers runs f on MySQL (or MariaDB) and on PostgreSQL, each with a
// pool of at most maxConns connections.
func servers(t *testing.T, maxConns int, f func(t *testing.T, db *sql.DB)) {
	for _, s := range dbtest.Servers() {
		if s.Name == "sqlite" {
			continue // bunqueue prepares nothing there
		}
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			f(t, s.Open(t, maxConns).DB)
		})
	}
}

// waitPrepared waits until Get returns a statement for text.
func waitPrepared(t *testing.T, c *prepared.Cache, text string) *sql.Stmt {
	t.Helper()
	var st *sql.Stmt
	require.Eventually(t, func() bool { st = c.Get(text); return st != nil }, 10*time.Second, 5*time.Millisecond, "%q is prepared", text)
	return st
}

// requireRuns runs st in a transaction of db and checks its one value.
func requireRuns(t *testing.T, db *sql.DB, st *sql.Stmt, want int) {
	t.Helper()
	n, err := queryInTx(t.Context(), db, st)
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// queryInTx runs st in a transaction of db and returns its one value.
func queryInTx(ctx context.Context, db *sql.DB, st *sql.Stmt) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	err = tx.StmtContext(ctx, st).QueryRowContext(ctx).Scan(&n)
	return n, err
}

// A text is prepared the second time it is asked for, not the first,
// and the statement runs in any transaction of the pool.
func TestPreparedOnTheSecondAsking(t *testing.T) {
	servers(t, 0, func(t *testing.T, db *sql.DB) {
		c := prepared.New(db, nil)
		defer c.Close()
		require.Nil(t, c.Get("SELECT 41 + 1"))
		time.Sleep(50 * time.Millisecond)
		require.Zero(t, c.Prepared(), "prepared after one asking")
		st := waitPrepared(t, c, "SELECT 41 + 1")
		require.Same(t, st, c.Get("SELECT 41 + 1"))
		for range 3 {
			requireRuns(t, db, st, 42)
		}
	})
}

// Texts that change with every asking are never prepared, and the cache
// keeps at most MaxTexts of them.
func TestChangingTextsAreNeverPrepared(t *testing.T) {
	servers(t, 0, func(t *testing.T, db *sql.DB) {
		c := prepared.New(db, nil)
		defer c.Close()
		for i := range 10 * prepared.MaxTexts {
			require.Nil(t, c.Get(fmt.Sprintf("SELECT %d", i)))
		}
		time.Sleep(50 * time.Millisecond)
		require.Zero(t, c.Prepared())
		// A recurring text still finds room among them.
		require.Nil(t, c.Get("SELECT 7"))
		waitPrepared(t, c, "SELECT 7")
	})
}

// A text the server refuses is reported once, runs in text meanwhile
// (Get returns nil), and is not prepared again before RetryAfter.
func TestFailedPreparationWaits(t *testing.T) {
	servers(t, 0, func(t *testing.T, db *sql.DB) {
		var mu sync.Mutex
		var failures []error
		c := prepared.New(db, func(text string, err error) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, err)
		})
		defer c.Close()
		const bad = "SELECT no_such_column FROM no_such_table_bq"
		c.Get(bad)
		c.Get(bad)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(failures) == 1 }, 10*time.Second, 5*time.Millisecond)
		for range 20 {
			require.Nil(t, c.Get(bad))
		}
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, failures, 1, "prepared again before RetryAfter")
	})
}

// A caller holding the pool's only connection is never kept waiting: the
// preparation waits for a connection in the background, and finishes
// once the caller's transaction has ended.
func TestPreparationNeverBlocksTheCaller(t *testing.T) {
	servers(t, 1, func(t *testing.T, db *sql.DB) {
		c := prepared.New(db, nil)
		defer c.Close()
		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		began := time.Now()
		require.Nil(t, c.Get("SELECT 5"))
		require.Nil(t, c.Get("SELECT 5"))
		require.Less(t, time.Since(began), time.Second, "Get waited for a connection")
		time.Sleep(100 * time.Millisecond)
		require.Nil(t, c.Get("SELECT 5"), "prepared without a connection")
		require.NoError(t, tx.Rollback())
		requireRuns(t, db, waitPrepared(t, c, "SELECT 5"), 5)
	})
}

// Drop closes a statement that failed: a transaction that took it before
// still runs it, Get returns nil after, and Close closes the rest (a
// transaction can still use one, prepared again just for it).
func TestDropAndClose(t *testing.T) {
	servers(t, 0, func(t *testing.T, db *sql.DB) {
		c := prepared.New(db, nil)
		c.Get("SELECT 3")
		st := waitPrepared(t, c, "SELECT 3")

		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		ts := tx.StmtContext(t.Context(), st)
		c.Drop("SELECT 3")
		var n int
		require.NoError(t, ts.QueryRowContext(t.Context()).Scan(&n), "a transaction that took the statement finishes with it")
		require.Equal(t, 3, n)
		require.NoError(t, tx.Commit())
		for range 5 {
			require.Nil(t, c.Get("SELECT 3"), "prepared again before RetryAfter")
		}

		c.Get("SELECT 4")
		other := waitPrepared(t, c, "SELECT 4")
		c.Close()
		require.Nil(t, c.Get("SELECT 4"))
		require.ErrorContains(t, other.QueryRowContext(t.Context()).Scan(&n), "statement is closed")
		// A worker that took it just before still runs it: database/sql
		// prepares a closed statement again for the transaction.
		requireRuns(t, db, other, 4)
	})
}

// Off closes the statements and prepares nothing after: Get returns nil
// however often a text recurs. It reports the first call only.
func TestOff(t *testing.T) {
	servers(t, 4, func(t *testing.T, db *sql.DB) {
		c := prepared.New(db, nil)
		defer c.Close()
		c.Get("SELECT 3")
		st := waitPrepared(t, c, "SELECT 3")
		require.True(t, c.Off())
		require.False(t, c.Off(), "only the first call turns them off")
		var n int
		require.ErrorContains(t, st.QueryRowContext(t.Context()).Scan(&n), "statement is closed")
		for range 5 {
			require.Nil(t, c.Get("SELECT 3"))
			require.Nil(t, c.Get("SELECT 4"))
		}
		time.Sleep(50 * time.Millisecond) // no preparation runs meanwhile
		require.Zero(t, c.Prepared())
	})
}
