package bunqueue_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type sessionItem struct {
	bun.BaseModel `bun:"table:bq_test_session"`
	ID            int64 `bun:",pk"`
	Status        string
}

// sessionIsolation returns the session's default isolation level
// (transaction_isolation on MySQL 8 and MariaDB 11.1+, tx_isolation on
// MariaDB before).
func sessionIsolation(t *testing.T, conn bun.Conn) string {
	t.Helper()
	var level string
	if isPG(conn) {
		require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT current_setting('default_transaction_isolation')").Scan(&level))
		return pgLevel(level)
	}
	if err := conn.QueryRowContext(t.Context(), "SELECT @@SESSION.transaction_isolation").Scan(&level); err != nil {
		require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT @@SESSION.tx_isolation").Scan(&level))
	}
	return level
}

// Workers keep a connection of their own, READ COMMITTED as its session
// default on MySQL, set in each BEGIN on PostgreSQL; handlers run at READ
// COMMITTED; and no connection goes back to the pool with a setting of
// the workers', after work, idling or Stop.
func TestWorkerSessionsDoNotLeakIntoThePool(t *testing.T) {
	t.Parallel()
	const workers = 4
	db := dbtest.Open(t, workers+4)
	if isPG(db) { // sessions that default to another level than the workers'
		db = dbtest.OpenSession(t, workers+4, map[string]string{"default_transaction_isolation": "repeatable read"})
	}
	createTable(t, db, "bq_test_session", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	for id := 1; id <= 400; id++ {
		dbtest.Exec(t, db, "INSERT INTO bq_test_session (id) VALUES ("+itoa(id)+")")
	}
	pool := func() []string {
		// Every connection the pool holds, at once.
		var conns []bun.Conn
		var levels []string
		for range db.Stats().Idle {
			conn, err := db.Conn(t.Context())
			require.NoError(t, err)
			conns = append(conns, conn)
			levels = append(levels, sessionIsolation(t, conn))
		}
		for _, c := range conns {
			require.NoError(t, c.Close())
		}
		return levels
	}
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	before := sessionIsolation(t, conn)
	require.NoError(t, conn.Close())
	require.NotEqual(t, "READ-COMMITTED", before, "the test needs a DSN whose sessions default to another level")

	var mu sync.Mutex
	levels := map[string]int{}
	q := bunqueue.NewQueue("session",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *sessionItem) error {
			var level string
			if isPG(tx) {
				if err := tx.NewRaw("SELECT current_setting('transaction_isolation')").Scan(ctx, &level); err != nil {
					return err
				}
				level = pgLevel(level)
			} else if err := tx.NewRaw("SELECT @@SESSION.transaction_isolation").Scan(ctx, &level); err != nil {
				if err := tx.NewRaw("SELECT @@SESSION.tx_isolation").Scan(ctx, &level); err != nil {
					return err
				}
			}
			mu.Lock()
			levels[level]++
			mu.Unlock()
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[sessionItem]{Workers: workers, PollInterval: 100 * time.Millisecond})
	c := newClient(t, db, q)
	start(t, c)
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_session WHERE status = 'done'") == 400
	}, "every row done")
	mu.Lock()
	require.Equal(t, map[string]int{"READ-COMMITTED": 400}, levels, "every handler ran in a READ COMMITTED session")
	mu.Unlock()

	// Idle for longer than PollInterval: the workers gave their
	// connections up, out of the pool.
	time.Sleep(300 * time.Millisecond)
	for _, level := range pool() {
		require.Equal(t, before, level, "a pooled connection kept a worker's session setting")
	}

	// And after work and Stop.
	dbtest.Exec(t, db, "UPDATE bq_test_session SET status = 'waiting' WHERE id <= 100")
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_session WHERE status = 'done'") == 400
	}, "every row done again")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	for _, level := range pool() {
		require.Equal(t, before, level, "a pooled connection kept a worker's session setting after Stop")
	}
}

// pgLevel writes a PostgreSQL isolation level as MySQL does:
// "read committed" as READ-COMMITTED.
func pgLevel(level string) string {
	return strings.ToUpper(strings.ReplaceAll(level, " ", "-"))
}
