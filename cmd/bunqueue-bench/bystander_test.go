package main

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The bench's jobs scenarios share the jobs table with whatever else runs
// on the database (other tests, here): they must delete only their own
// queue's jobs, though other jobs' ids fall among theirs. Jobs of another
// queue, inserted all through the run, must all be there after it.
func TestBenchLeavesOtherJobsAlone(t *testing.T) {
	dbtest.OnlyMySQL(t, "the PostgreSQL bench test runs on a database of its own")
	ctx := t.Context()
	db := dbtest.Open(t, 4)
	require.NoError(t, bunqueue.Migrate(ctx, db))
	queue := dbtest.Name("bench_bystander")
	t.Cleanup(func() { _, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue) })
	bin := buildBinary(t)

	var inserted atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			// Far in the future: no bench queue would claim it anyway.
			_, err := db.ExecContext(context.Background(), "INSERT INTO bunqueue_jobs (queue, kind, args, max_attempts, run_at, created_at)"+
				" VALUES (?, 'bystander', '{}', 1, UTC_TIMESTAMP(6) + INTERVAL 1 DAY, UTC_TIMESTAMP(6))", queue)
			if err != nil {
				done <- err
				return
			}
			inserted.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	_, stderr, code := runBinary(t, bin, "--duration", "300ms",
		"--only", "write-only-jobs,write-only-jobs-b50,design-bound-jobs")
	close(stop)
	require.NoError(t, <-done)
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	require.Positive(t, inserted.Load())
	require.Equal(t, int(inserted.Load()), count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue),
		"the bench deleted jobs of another queue")
}

func count(t *testing.T, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), query, args...).Scan(&n))
	return n
}
