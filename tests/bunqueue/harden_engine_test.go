package bunqueue_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of this file hold the engine to one rule: whatever the app's
// code does (a handler, a worker, a hook, OnError, Backoff, a query
// function), it fails its item, or its batch, and never the process, a
// worker goroutine or a row; and Stop, however often it is called, returns
// only once the workers are done.

// brokenErr is an error whose Error method reads its receiver: a nil
// *brokenErr returned as an error panics when it is read.
type brokenErr struct{ msg string }

func (e *brokenErr) Error() string { return e.msg }

// typedNil returns a nil *brokenErr as a non-nil error.
func typedNil() error {
	var e *brokenErr
	return e
}

// heItems creates table, a queue table of rows (id, status, attempts)
// with the rows of ids waiting, on every server's DDL.
func heItems(t *testing.T, db *bun.DB, table string, ids ...int64) {
	t.Helper()
	srvTable(t, db, table, "id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0", "status, id")
	for _, id := range ids {
		_, err := db.NewRaw("INSERT INTO ? (id) VALUES (?)", bun.Ident(table), id).Exec(t.Context())
		require.NoError(t, err)
	}
}

// heRow holds the columns of a table of heItems that the tests read; each
// test's model embeds it, with a table of its own.
type heRow struct {
	ID     int64 `bun:",pk"`
	Status string
}

// heWaiting is the query of the queues of this file.
func heWaiting(q *bun.SelectQuery) *bun.SelectQuery {
	return q.Where("status = 'waiting'").Order("id")
}

// setStatus sets the row's status through tx.
func setStatus[T any](ctx context.Context, tx bun.Tx, it *T, status string) error {
	_, err := tx.NewUpdate().Model(it).Set("status = ?", status).WherePK().Exec(ctx)
	return err
}

// recordFailed is an OnError that keeps each cause in f and marks the row
// failed, with one more attempt.
func recordFailed[T any](f *failures, id func(*T) int64) func(ctx context.Context, tx bun.Tx, it *T, err error) error {
	return func(ctx context.Context, tx bun.Tx, it *T, err error) error {
		f.add(id(it), err)
		_, uerr := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
		return uerr
	}
}

// statusOf returns the status of row id of table.
func statusOf(t *testing.T, db bun.IDB, table string, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, db.NewRaw("SELECT status FROM ? WHERE id = ?", bun.Ident(table), id).Scan(t.Context(), &s))
	return s
}

// waitNoneWaiting waits until no row of table waits.
func waitNoneWaiting(t *testing.T, db bun.IDB, table string) {
	t.Helper()
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM ? WHERE status = 'waiting'", bun.Ident(table)) == 0
	}, "every row of %s left the queue", table)
}

// requireUnreadable requires that err is the *PanicError that stands for
// an error the app returned that could not be read.
func requireUnreadable(t *testing.T, err error) {
	t.Helper()
	var pe *bunqueue.PanicError
	require.ErrorAs(t, err, &pe)
	require.ErrorContains(t, err, "*bunqueue_test.brokenErr")
	require.NotEmpty(t, pe.Stack)
}

type heTypedNil struct {
	bun.BaseModel `bun:"table:bq_he_typednil"`
	heRow
}

// A handler that returns a nil *T as its error fails its row, which
// OnError records, as if it had panicked; the writes it made are undone.
func TestHandlerReturningTypedNilErrorFailsItsRow(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_typednil", 1, 2, 3)
		var causes failures
		q := bunqueue.NewQueue("he-typednil", heWaiting, func(ctx context.Context, tx bun.Tx, it *heTypedNil) error {
			if err := setStatus(ctx, tx, it, "done"); err != nil || it.ID != 2 {
				return err
			}
			return typedNil()
		}, &bunqueue.QueueConfig[heTypedNil]{OnError: recordFailed(&causes, func(it *heTypedNil) int64 { return it.ID })})
		start(t, newClient(t, db, q))
		waitNoneWaiting(t, db, "bq_he_typednil")
		require.Equal(t, "failed", statusOf(t, db, "bq_he_typednil", 2), "OnError recorded it; the handler's update was undone")
		require.Len(t, causes.of(2), 1)
		requireUnreadable(t, causes.of(2)[0])
		require.Equal(t, "done", statusOf(t, db, "bq_he_typednil", 3), "the worker went on")
	})
}

type heBatchNil struct {
	bun.BaseModel `bun:"table:bq_he_batchnil"`
	heRow
}

// A batch handler that returns a nil *T for a batch fails it like any
// error: its rows run one by one, and the bad one fails alone.
func TestBatchHandlerReturningTypedNilError(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_batchnil", 1, 2, 3)
		var causes failures
		q := bunqueue.NewBatchQueue("he-batchnil", heWaiting, func(ctx context.Context, tx bun.Tx, items []heBatchNil) error {
			for i := range items {
				if err := setStatus(ctx, tx, &items[i], "done"); err != nil {
					return err
				}
			}
			for _, it := range items {
				if it.ID == 2 {
					return typedNil()
				}
			}
			return nil
		}, &bunqueue.QueueConfig[heBatchNil]{Workers: 1, BatchSize: 10,
			OnError: recordFailed(&causes, func(it *heBatchNil) int64 { return it.ID })})
		start(t, newClient(t, db, q))
		waitNoneWaiting(t, db, "bq_he_batchnil")
		require.Equal(t, "failed", statusOf(t, db, "bq_he_batchnil", 2))
		require.Equal(t, 2, count(t, db, "SELECT COUNT(*) FROM bq_he_batchnil WHERE status = 'done'"))
		require.NotEmpty(t, causes.of(2))
		requireUnreadable(t, causes.of(2)[0])
	})
}

// brokenHook fails WorkBegin with a nil *T for the row id=1, and WorkEnd
// with one for id=2 and a panic for id=3.
type brokenHook struct{}

func (brokenHook) WorkBegin(ctx context.Context, w *bunqueue.WorkInfo) error {
	if w.Key == "id=1" {
		return typedNil()
	}
	return nil
}

func (brokenHook) WorkEnd(ctx context.Context, w *bunqueue.WorkInfo, err error) error {
	switch w.Key {
	case "id=2":
		return typedNil()
	case "id=3":
		panic("WorkEnd broke")
	}
	return err
}

type heHook struct {
	bun.BaseModel `bun:"table:bq_he_hook"`
	heRow
}

// Lifecycle hooks that return a nil *T, or panic, fail their row.
func TestHooksReturningTypedNilErrorFailTheirRow(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_hook", 1, 2, 3, 4)
		var causes failures
		c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: testLogger(t), Hooks: []bunqueue.Hook{{WorkBegin: brokenHook{}.WorkBegin, WorkEnd: brokenHook{}.WorkEnd}}})
		require.NoError(t, err)
		require.NoError(t, c.Add(bunqueue.NewQueue("he-hook", heWaiting, func(ctx context.Context, tx bun.Tx, it *heHook) error {
			return setStatus(ctx, tx, it, "done")
		}, &bunqueue.QueueConfig[heHook]{OnError: recordFailed(&causes, func(it *heHook) int64 { return it.ID })})))
		start(t, c)
		waitNoneWaiting(t, db, "bq_he_hook")
		for _, id := range []int64{1, 2} {
			require.Equal(t, "failed", statusOf(t, db, "bq_he_hook", id), "row %d", id)
			require.Len(t, causes.of(id), 1, "row %d", id)
			requireUnreadable(t, causes.of(id)[0])
		}
		require.Equal(t, "failed", statusOf(t, db, "bq_he_hook", 3))
		require.ErrorContains(t, causes.of(3)[0], "WorkEnd broke")
		require.Equal(t, "done", statusOf(t, db, "bq_he_hook", 4))
	})
}

type heOnError struct {
	bun.BaseModel `bun:"table:bq_he_onerror"`
	heRow
}

// An OnError that returns a nil *T has failed: its writes are undone and
// the row cools down, as after any error of OnError's.
func TestOnErrorReturningTypedNilError(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_onerror", 1)
		q := bunqueue.NewQueue("he-onerror", heWaiting, func(ctx context.Context, tx bun.Tx, it *heOnError) error {
			return errors.New("the handler failed")
		}, &bunqueue.QueueConfig[heOnError]{OnError: func(ctx context.Context, tx bun.Tx, it *heOnError, _ error) error {
			if err := setStatus(ctx, tx, it, "failed"); err != nil {
				return err
			}
			return typedNil()
		}})
		newClient(t, db, q)
		ok, err := q.ProcessNext(t.Context())
		require.True(t, ok)
		var ie *bunqueue.ItemError
		require.ErrorAs(t, err, &ie)
		require.False(t, ie.Recorded)
		require.Positive(t, ie.Cooldown)
		require.ErrorContains(t, err, "the handler failed")
		require.ErrorContains(t, err, "OnError failed too")
		requireUnreadable(t, err)
		require.Equal(t, "waiting", statusOf(t, db, "bq_he_onerror", 1), "OnError's writes were undone")
	})
}

type heJobArgs struct {
	N int `json:"n"`
}

func (heJobArgs) Kind() string { return "he_job" }

// heJobClient returns a client of one jobs queue in mode over db, with
// cfg's Backoff and Hooks, whose worker is work; queue's rows are deleted
// when the test ends.
func heJobClient(t *testing.T, db *bun.DB, mode bunqueue.JobMode, cfg bunqueue.Config, work func(ctx context.Context, job *bunqueue.Job[heJobArgs]) error) (*bunqueue.Client, string) {
	t.Helper()
	queue := ownJobQueue(t, db)
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = testLogger(t)
	cfg.JobQueues = map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: 1, Lease: 5 * time.Second}}
	c, err := bunqueue.NewClient(db, &cfg)
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[heJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[heJobArgs]) error {
		return work(ctx, job)
	})))
	return c, queue
}

// onModes runs test once per job mode, as a subtest, on the jobs tables
// of srv.
func onModes(t *testing.T, srv dbtest.Server, test func(t *testing.T, db *bun.DB, mode bunqueue.JobMode)) {
	db := srv.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) { test(t, db, mode) })
	}
}

// A worker that returns a nil *T fails its attempt: the job is retried,
// then moves to the failed jobs with what could be read of its error.
func TestWorkerReturningTypedNilErrorIsRetried(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		onModes(t, srv, func(t *testing.T, db *bun.DB, mode bunqueue.JobMode) {
			var runs atomic.Int64
			c, queue := heJobClient(t, db, mode, bunqueue.Config{Backoff: fastBackoff}, func(context.Context, *bunqueue.Job[heJobArgs]) error {
				runs.Add(1)
				return typedNil()
			})
			id := enqueueOne(t, c, db, heJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
			start(t, c)
			f := waitFailed(t, db, id, 30*time.Second)
			require.Equal(t, 2, f.Attempts)
			require.Contains(t, f.Error, "*bunqueue_test.brokenErr")
			require.Equal(t, int64(2), runs.Load())
		})
	})
}

// A Backoff that panics does not lose the attempt: the job waits
// DefaultBackoff's time instead, and runs again.
func TestBackoffThatPanicsStillRetries(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		onModes(t, srv, func(t *testing.T, db *bun.DB, mode bunqueue.JobMode) {
			var mu sync.Mutex
			var attempts []int
			backoff := func(int) time.Duration { panic("Backoff broke") }
			c, queue := heJobClient(t, db, mode, bunqueue.Config{Backoff: backoff}, func(_ context.Context, job *bunqueue.Job[heJobArgs]) error {
				mu.Lock()
				attempts = append(attempts, job.Attempt)
				mu.Unlock()
				if job.Attempt == 1 {
					return errors.New("the first attempt fails")
				}
				return nil
			})
			enqueueOne(t, c, db, heJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
			start(t, c)
			eventually(t, 30*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
			}, "the job ran again and completed")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []int{1, 2}, attempts, "the failed attempt was recorded")
		})
	})
}

type heQuery struct {
	bun.BaseModel `bun:"table:bq_he_query"`
	heRow
}

// A query function that panics once the queue runs fails the queue's
// reads, the client's idle probe and the depth gauge's count, which are
// logged, not the process; the queue runs again once it stops panicking.
func TestQueryFunctionThatPanicsLater(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_query")
		var broken atomic.Bool
		var panics, calls atomic.Int64
		q := bunqueue.NewQueue("he-query", func(q *bun.SelectQuery) *bun.SelectQuery {
			calls.Add(1)
			if broken.Load() {
				panics.Add(1)
				panic("the query function broke")
			}
			return heWaiting(q)
		}, func(ctx context.Context, tx bun.Tx, it *heQuery) error { return setStatus(ctx, tx, it, "done") }, nil)
		reader := sdkmetric.NewManualReader()
		c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		require.NoError(t, err)
		require.NoError(t, c.Add(q))
		start(t, c)

		// The queue is empty: its feed waits, and the client's idle probe,
		// which runs the query function too, looks at it every poll.
		eventually(t, 10*time.Second, func() bool { return calls.Load() >= 10 }, "the idle probe runs")
		broken.Store(true)
		eventually(t, 10*time.Second, func() bool { return panics.Load() >= 3 }, "the queue was read again after a panic")
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm), "the depth gauge's count panicked")
		broken.Store(false)
		_, err = db.NewRaw("INSERT INTO bq_he_query (id) VALUES (1)").Exec(t.Context())
		require.NoError(t, err)
		waitNoneWaiting(t, db, "bq_he_query")
		require.Equal(t, "done", statusOf(t, db, "bq_he_query", 1))
	})
}

type heKey struct {
	bun.BaseModel `bun:"table:bq_he_key"`
	heRow
}

// A handler that changes its model's primary key, and leaves the row in
// the queue, is caught by the re-check, which looks the row up by the key
// it was claimed with as well as by the model's: ErrStillQueued, its
// writes undone, the row cooling down under the key it was claimed with.
// So is one that changes the key in SQL only (an UPDATE through its tx
// that sets the key column), which would otherwise be re-keyed for ever.
func TestHandlerThatChangesItsKeyIsReportedNotLooped(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, tc := range []struct {
			name    string
			handler func(ctx context.Context, tx bun.Tx, it *heKey) error
		}{
			{"model and row", func(ctx context.Context, tx bun.Tx, it *heKey) error {
				old := it.ID
				it.ID += 1000
				_, err := tx.NewUpdate().Model(it).Set("id = ?", it.ID).Where("id = ?", old).Exec(ctx)
				return err
			}},
			{"model only", func(ctx context.Context, tx bun.Tx, it *heKey) error {
				it.ID += 1000
				return nil
			}},
			{"row only, query builder", func(ctx context.Context, tx bun.Tx, it *heKey) error {
				_, err := tx.NewUpdate().Model(it).Set("id = ?", it.ID+1000).WherePK().Exec(ctx)
				return err
			}},
			{"row only, raw SQL", func(ctx context.Context, tx bun.Tx, it *heKey) error {
				_, err := tx.ExecContext(ctx, "UPDATE bq_he_key SET attempts = attempts + 1, id = id + 1000 WHERE id = ?", it.ID)
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				db := srv.Open(t, 0)
				heItems(t, db, "bq_he_key", 1)
				q := bunqueue.NewQueue("he-key", heWaiting, tc.handler, &bunqueue.QueueConfig[heKey]{Cooldown: time.Hour})
				newClient(t, db, q)
				ok, err := q.ProcessNext(t.Context())
				require.True(t, ok)
				require.ErrorIs(t, err, bunqueue.ErrStillQueued)
				require.ErrorContains(t, err, `queue "he-key": row id=1:`)
				if strings.Contains(tc.name, "row only") {
					require.ErrorContains(t, err, "changed the row's key in SQL, by an UPDATE that sets id, but not in its model")
				} else {
					require.ErrorContains(t, err, "id=1001")
				}
				require.Equal(t, []int64{1}, ids(t, db, "SELECT id FROM bq_he_key"), "the key change was undone")
				ok, err = q.ProcessNext(t.Context())
				require.NoError(t, err)
				require.False(t, ok, "the row cools down under the key it was claimed with")
			})
		}
	})
}

type heKeyBatch struct {
	bun.BaseModel `bun:"table:bq_he_key_batch"`
	heRow
}

// In a batch, the row whose handler changed its model's key fails with
// ErrStillQueued and reaches RecentFailures; the others commit.
func TestKeyChangeInABatch(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_key_batch", 1, 2, 3)
		var calls [4]atomic.Int64
		q := bunqueue.NewQueue("he-key-batch", heWaiting, func(ctx context.Context, tx bun.Tx, it *heKeyBatch) error {
			calls[it.ID].Add(1)
			if it.ID == 2 {
				it.ID = 42 // and the row stays as it is
				return nil
			}
			return setStatus(ctx, tx, it, "done")
		}, &bunqueue.QueueConfig[heKeyBatch]{Workers: 1, BatchSize: 10, Cooldown: time.Hour})
		c := newClient(t, db, q)
		start(t, c)
		eventually(t, 20*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_he_key_batch WHERE status = 'done'") == 2 && len(c.RecentFailures()) > 0
		}, "rows 1 and 3 done, row 2 reported")
		f := c.RecentFailures()[0]
		require.Equal(t, "id=2", f.Key)
		require.Contains(t, f.Error, bunqueue.ErrStillQueued.Error())
		require.Equal(t, "waiting", statusOf(t, db, "bq_he_key_batch", 2))
		require.Equal(t, int64(1), calls[2].Load(), "row 2 cools down")
	})
}

type heKeySQL struct {
	bun.BaseModel `bun:"table:bq_he_key_sql"`
	heRow
}

// In a batch run by workers, the row whose handler changed its key in
// SQL only fails with ErrStillQueued, keeps its key, and cools down; the
// others commit.
func TestKeyChangeInSQLInABatch(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_key_sql", 1, 2, 3)
		var calls [4]atomic.Int64
		q := bunqueue.NewQueue("he-key-sql", heWaiting, func(ctx context.Context, tx bun.Tx, it *heKeySQL) error {
			if it.ID < int64(len(calls)) {
				calls[it.ID].Add(1)
			}
			if it.ID == 2 {
				_, err := tx.NewUpdate().Model(it).Set("id = 42").WherePK().Exec(ctx)
				return err
			}
			return setStatus(ctx, tx, it, "done")
		}, &bunqueue.QueueConfig[heKeySQL]{Workers: 2, BatchSize: 10, Cooldown: time.Hour})
		c := newClient(t, db, q)
		start(t, c)
		eventually(t, 20*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_he_key_sql WHERE status = 'done'") == 2 && len(c.RecentFailures()) > 0
		}, "rows 1 and 3 done, row 2 reported")
		f := c.RecentFailures()[0]
		require.Equal(t, "id=2", f.Key)
		require.Contains(t, f.Error, "changed the row's key in SQL")
		require.Equal(t, []int64{1, 2, 3}, ids(t, db, "SELECT id FROM bq_he_key_sql ORDER BY id"), "row 2 kept its key")
		require.Equal(t, "waiting", statusOf(t, db, "bq_he_key_sql", 2))
		require.Equal(t, int64(1), calls[2].Load(), "row 2 cools down")
		for _, id := range []int{1, 3} {
			// Row 3, if it came after row 2 in a batch, was undone with
			// it (savepoints nest) and ran again.
			require.Contains(t, []int64{1, 2}, calls[id].Load(), "row %d", id)
		}
	})
}

type heGoexit struct {
	bun.BaseModel `bun:"table:bq_he_goexit"`
	heRow
}

// A handler that calls runtime.Goexit (as t.FailNow does) fails its row
// with ErrGoexit, which OnError records; its writes are undone, the
// goroutine that called it goes on, and the row runs again.
func TestHandlerThatCallsGoexit(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_goexit", 1, 2, 3)
		var mu sync.Mutex
		calls := map[int64]int{}
		var causes failures
		newQueue := func(workers int) *bunqueue.Queue[heGoexit] {
			return bunqueue.NewQueue("he-goexit", heWaiting, func(ctx context.Context, tx bun.Tx, it *heGoexit) error {
				if err := setStatus(ctx, tx, it, "done"); err != nil {
					return err
				}
				mu.Lock()
				calls[it.ID]++
				first := calls[it.ID] == 1
				mu.Unlock()
				if first && it.ID <= 2 {
					runtime.Goexit()
				}
				return nil
			}, &bunqueue.QueueConfig[heGoexit]{Workers: workers, OnError: func(ctx context.Context, tx bun.Tx, it *heGoexit, err error) error {
				causes.add(it.ID, err)
				_, uerr := tx.NewUpdate().Model(it).Set("attempts = attempts + 1").WherePK().Exec(ctx)
				return uerr
			}})
		}

		t.Run("ProcessNext", func(t *testing.T) {
			q := newQueue(1)
			newClient(t, db, q)
			ok, err := q.ProcessNext(t.Context())
			require.True(t, ok)
			require.ErrorIs(t, err, bunqueue.ErrGoexit)
			var ie *bunqueue.ItemError
			require.ErrorAs(t, err, &ie)
			require.True(t, ie.Recorded)
			require.Equal(t, "waiting", statusOf(t, db, "bq_he_goexit", 1), "the handler's update was undone")
		})
		t.Run("Workers", func(t *testing.T) {
			start(t, newClient(t, db, newQueue(1)))
			waitNoneWaiting(t, db, "bq_he_goexit")
		})
		require.Equal(t, []int{1, 1}, []int{
			count(t, db, "SELECT attempts FROM bq_he_goexit WHERE id = 1"),
			count(t, db, "SELECT attempts FROM bq_he_goexit WHERE id = 2"),
		}, "each Goexit was recorded as a failure")
		for _, id := range []int64{1, 2} {
			require.Len(t, causes.of(id), 1)
			require.ErrorIs(t, causes.of(id)[0], bunqueue.ErrGoexit)
		}
	})
}

// A worker that calls runtime.Goexit fails its attempt: the job is
// retried, and the queue's one worker goes on to the other jobs.
func TestWorkerThatCallsGoexit(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		onModes(t, srv, func(t *testing.T, db *bun.DB, mode bunqueue.JobMode) {
			var mu sync.Mutex
			runs := map[int][]int{}
			c, queue := heJobClient(t, db, mode, bunqueue.Config{Backoff: fastBackoff}, func(_ context.Context, job *bunqueue.Job[heJobArgs]) error {
				mu.Lock()
				runs[job.Args.N] = append(runs[job.Args.N], job.Attempt)
				mu.Unlock()
				if job.Args.N == 1 && job.Attempt == 1 {
					runtime.Goexit()
				}
				return nil
			})
			for n := 1; n <= 3; n++ {
				enqueueOne(t, c, db, heJobArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
			}
			start(t, c)
			eventually(t, 30*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
			}, "every job completed")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[int][]int{1: {1, 2}, 2: {1}, 3: {1}}, runs)
		})
	})
}

type heStop struct {
	bun.BaseModel `bun:"table:bq_he_stop"`
	heRow
}

// waitStopping waits until a Stop of c has begun.
func waitStopping(t *testing.T, c *bunqueue.Client) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		return errors.Is(c.Start(t.Context()), bunqueue.ErrStopped)
	}, "Stop began")
}

// Every Stop, however many run at once, returns only once the rows in
// flight are done.
func TestStopsWhileDrainingWaitForTheDrain(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_stop", 1)
		inHandler, release := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		q := bunqueue.NewQueue("he-stop", heWaiting, func(ctx context.Context, tx bun.Tx, it *heStop) error {
			close(inHandler)
			<-release
			finished.Store(true)
			return setStatus(ctx, tx, it, "done")
		}, nil)
		c := newClient(t, db, q)
		require.NoError(t, c.Start(t.Context()))
		<-inHandler

		const stops = 3
		returned := make(chan error, stops)
		for range stops {
			go func() {
				err := c.Stop(context.Background())
				if err == nil && !finished.Load() {
					err = errors.New("Stop returned while a handler ran")
				}
				returned <- err
			}()
		}
		waitStopping(t, c)
		time.Sleep(100 * time.Millisecond) // room for a Stop that would not wait to return
		close(release)
		for range stops {
			require.NoError(t, <-returned)
		}
		require.Equal(t, "done", statusOf(t, db, "bq_he_stop", 1))
		require.NoError(t, c.Stop(context.Background()), "a Stop after the drain")
	})
}

type heStopCancel struct {
	bun.BaseModel `bun:"table:bq_he_stop_cancel"`
	heRow
}

// A second Stop whose context has ended while the first drains cancels the
// handlers, waits for them, and returns its context's error.
func TestSecondStopWithEndedContextCancels(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		heItems(t, db, "bq_he_stop_cancel", 1)
		inHandler, release := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(release) }) // ends the handler if the test fails
		var cancelled atomic.Bool
		q := bunqueue.NewQueue("he-stop-cancel", heWaiting, func(ctx context.Context, tx bun.Tx, it *heStopCancel) error {
			if err := setStatus(ctx, tx, it, "done"); err != nil {
				return err
			}
			close(inHandler)
			select {
			case <-ctx.Done():
				cancelled.Store(true)
				return ctx.Err()
			case <-release:
				return errors.New("released by the test's end")
			}
		}, nil)
		c := newClient(t, db, q)
		require.NoError(t, c.Start(t.Context()))
		<-inHandler

		first := make(chan error, 1)
		go func() { first <- c.Stop(context.Background()) }()
		waitStopping(t, c)
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		err := c.Stop(ended)
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, cancelled.Load(), "the handler was cancelled before Stop returned")
		require.NoError(t, <-first, "the first Stop returns once the drain is over")
		require.Equal(t, "waiting", statusOf(t, db, "bq_he_stop_cancel", 1), "the cancelled row is back")
	})
}
