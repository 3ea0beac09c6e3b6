package bunqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// createTable drops and creates a test's own table with the given columns,
// and drops it when the test ends.
// The columns are written in MySQL's DDL; on PostgreSQL dbtest.DDL
// translates them.
func createTable(t *testing.T, db *bun.DB, name, columns string) {
	t.Helper()
	dbtest.CreateTable(t, db, name, columns)
}

// dialectOf returns the engine's SQL dialect of db.
func dialectOf(db interface{ Dialect() schema.Dialect }) sqldialect.Dialect {
	d, err := sqldialect.For(db)
	if err != nil {
		panic(err)
	}
	return d
}

// nowSQL returns the SQL of the server's current UTC time, as the engine
// writes it: UTC_TIMESTAMP(6) on MySQL, statement_timestamp() on PostgreSQL.
func nowSQL(db interface{ Dialect() schema.Dialect }) string { return dialectOf(db).Now() }

// plusSQL returns the SQL of the server's current time plus d (which may
// be negative).
func plusSQL(db interface{ Dialect() schema.Dialect }, d time.Duration) string {
	return dialectOf(db).NowPlus(d)
}

// isPG reports whether db is a PostgreSQL database.
func isPG(db interface{ Dialect() schema.Dialect }) bool {
	return db.Dialect().Name() == dialect.PG
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

// diffSQL returns the SQL of TIMESTAMPDIFF(unit, from, to), an integer
// count of unit (SECOND, MINUTE or MICROSECOND) from from to to, on the
// server of db.
func diffSQL(db interface{ Dialect() schema.Dialect }, unit, from, to string) string {
	if !isPG(db) {
		return "TIMESTAMPDIFF(" + unit + ", " + from + ", " + to + ")"
	}
	per := map[string]string{"SECOND": "1", "MINUTE": "1.0/60", "MICROSECOND": "1000000"}[unit]
	if per == "" {
		panic("diffSQL: unit " + unit)
	}
	return "TRUNC(EXTRACT(EPOCH FROM (" + to + ") - (" + from + ")) * " + per + ")::bigint"
}

// insertID runs insert, an INSERT of one row into a table whose key
// column is id, and returns the new row's id (RETURNING id on
// PostgreSQL, which has no LastInsertId).
func insertID(t *testing.T, db bun.IDB, insert string, args ...any) int64 {
	t.Helper()
	if isPG(db) {
		var id int64
		require.NoError(t, db.NewRaw(insert+" RETURNING id", args...).Scan(t.Context(), &id))
		return id
	}
	r, err := db.NewRaw(insert, args...).Exec(t.Context())
	require.NoError(t, err)
	id, err := r.LastInsertId()
	require.NoError(t, err)
	return id
}

// quoteBackticks returns s, written with MySQL's backticks, with db's
// identifier quote: double quotes on PostgreSQL.
func quoteBackticks(db interface{ Dialect() schema.Dialect }, s string) string {
	if isPG(db) {
		return strings.ReplaceAll(s, "`", `"`)
	}
	return s
}

// requireUTC requires that tm, a time the engine read from the database,
// is in time.UTC, as the API promises, whatever the driver's location
// (pgx reads timestamptz in time.Local).
func requireUTC(t *testing.T, tm time.Time, what string) {
	t.Helper()
	require.Equal(t, time.UTC, tm.Location(), what)
}
