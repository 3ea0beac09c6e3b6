package bunqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/dbtest"
)

// createTable drops and creates a test's own table with the given columns,
// and drops it when the test ends.
func createTable(t *testing.T, db *bun.DB, name, columns string) {
	t.Helper()
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS "+name,
		"CREATE TABLE "+name+" ("+columns+") ENGINE=InnoDB")
	t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + name)
	})
}

// newClient returns a client over db with a fast poll and a logger that
// writes to the test log; Stop runs when the test ends.
func newClient(t *testing.T, db *bun.DB, queues ...bunqueue.AnyQueue) *bunqueue.Client {
	t.Helper()
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, c.Add(q))
	}
	return c
}

// start starts c and stops it when the test ends.
func start(t *testing.T, c *bunqueue.Client) {
	t.Helper()
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
}

// eventually polls cond until it holds or the wait runs out.
func eventually(t *testing.T, wait time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, wait, 10*time.Millisecond, append([]any{msg}, args...)...)
}

func count(t *testing.T, db bun.IDB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.NewRaw(query, args...).Scan(context.Background(), &n))
	return n
}
