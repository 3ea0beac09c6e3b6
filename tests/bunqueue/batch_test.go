package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type batchItem struct {
	bun.BaseModel `bun:"table:bq_test_batch"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
}

func batchQuery(q *bun.SelectQuery) *bun.SelectQuery {
	return q.Where("status = 'waiting'").Order("id")
}

// doneAll takes every row of the batch out of the queue with one UPDATE.
func doneAll(ctx context.Context, tx bun.Tx, items []batchItem) error {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	_, err := tx.NewUpdate().Model((*batchItem)(nil)).Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx)
	return err
}

func fillBatchTable(t *testing.T, db *bun.DB, table string, n int) {
	t.Helper()
	createTable(t, db, table, "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, INDEX (status, id)")
	for from := 1; from <= n; from += 1000 {
		stmt := "INSERT INTO " + table + " (id) VALUES "
		for id := from; id < from+1000 && id <= n; id++ {
			if id > from {
				stmt += ","
			}
			stmt += fmt.Sprintf("(%d)", id)
		}
		dbtest.Exec(t, db, stmt)
	}
}

// A batch handler gets whole batches: every row is processed once, in far
// fewer calls than rows, by several workers.
func TestBatchHandlerGetsWholeBatches(t *testing.T) {
	t.Parallel()
	const rows = 2000
	db := dbtest.Open(t, 0)
	fillBatchTable(t, db, "bq_test_batch", rows)
	var calls, seen atomic.Int64
	var mu sync.Mutex
	ids := map[int64]int{}
	q := bunqueue.NewBatchQueue("batch", batchQuery, func(ctx context.Context, tx bun.Tx, items []batchItem) error {
		calls.Add(1)
		seen.Add(int64(len(items)))
		mu.Lock()
		for _, it := range items {
			ids[it.ID]++
		}
		mu.Unlock()
		return doneAll(ctx, tx, items)
	}, &bunqueue.QueueConfig[batchItem]{Workers: 4, BatchSize: 50})
	c := newClient(t, db, q)
	start(t, c)
	eventually(t, 30*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_batch WHERE status = 'done'") == rows
	}, "every row done")
	require.Equal(t, int64(rows), seen.Load(), "each row handed to the handler once")
	require.Len(t, ids, rows)
	for id, n := range ids {
		require.Equal(t, 1, n, "row %d", id)
	}
	t.Logf("%d rows in %d calls", rows, calls.Load())
	require.Less(t, calls.Load(), int64(rows/5), "rows came in batches")
}

// When the batch handler fails, its writes are undone and each row runs
// alone in its own savepoint: the bad row fails alone (OnError records
// it), the others commit; the hooks see the batch and then each row.
func TestBatchHandlerFailureIsolatesTheBadRow(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	fillBatchTable(t, db, "bq_test_batch_fail", 10)
	type failItem struct {
		bun.BaseModel `bun:"table:bq_test_batch_fail"`
		batchItem
	}
	errBad := errors.New("row 7 is bad")
	var mu sync.Mutex
	var calls [][]int64
	hook := &batchHook{}
	q := bunqueue.NewBatchQueue("batch-fail", batchQuery, func(ctx context.Context, tx bun.Tx, items []failItem) error {
		ids := make([]int64, len(items))
		for i, it := range items {
			ids[i] = it.ID
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		// A write that must be undone when the call fails.
		if _, err := tx.NewUpdate().Model((*failItem)(nil)).Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx); err != nil {
			return err
		}
		if slices.Contains(ids, 7) {
			return errBad
		}
		return nil
	}, &bunqueue.QueueConfig[failItem]{
		Workers:   1,
		BatchSize: 10,
		Hooks:     []bunqueue.Hook{{WorkBegin: hook.WorkBegin}},
		OnError: func(ctx context.Context, tx bun.Tx, it *failItem, err error) error {
			_, uerr := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
			return uerr
		},
	})
	c := newClient(t, db, q)
	ok, err := q.ProcessNext(t.Context()) // one row: the handler gets a batch of one
	require.True(t, ok)
	require.NoError(t, err)

	// The nine others in one claim: the whole-batch call fails on row 7.
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_batch_fail WHERE status = 'waiting'") == 0
	}, "the queue drains")
	require.Equal(t, 9, count(t, db, "SELECT COUNT(*) FROM bq_test_batch_fail WHERE status = 'done'"))
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_test_batch_fail WHERE status = 'failed' AND id = 7 AND attempts = 1"))

	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls: %v", calls)
	var wholeFailed bool
	for _, ids := range calls {
		if len(ids) > 1 && slices.Contains(ids, 7) {
			wholeFailed = true
		}
	}
	require.True(t, wholeFailed, "row 7 came in a batch whose call failed: %v", calls)
	alone := 0
	for _, ids := range calls {
		if len(ids) == 1 && ids[0] == 7 {
			alone++
		}
	}
	require.Equal(t, 1, alone, "then row 7 ran alone once: %v", calls)
	require.True(t, hook.sawKeys(), "a hook saw WorkInfo.Keys of a batch call")
}

// batchHook records what the lifecycle hooks were called with.
type batchHook struct {
	mu    sync.Mutex
	infos []bunqueue.WorkInfo
}

func (h *batchHook) WorkBegin(_ context.Context, info *bunqueue.WorkInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.infos = append(h.infos, *info)
	return nil
}

func (h *batchHook) sawKeys() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, wi := range h.infos {
		if len(wi.Keys) > 1 && wi.Key == "" && wi.Keys[0] != "" {
			return true
		}
	}
	return false
}

// A batch handler that leaves a row in the queue: the whole batch's
// writes are undone, that row is reported and cooled down, the others
// return to the queue and are processed again.
func TestBatchHandlerThatKeepsARowUndoesTheBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	fillBatchTable(t, db, "bq_test_batch_keep", 5)
	type keepItem struct {
		bun.BaseModel `bun:"table:bq_test_batch_keep"`
		batchItem
	}
	var first atomic.Bool
	first.Store(true)
	q := bunqueue.NewBatchQueue("batch-keep", batchQuery, func(ctx context.Context, tx bun.Tx, items []keepItem) error {
		var ids []int64
		for _, it := range items {
			if it.ID == 3 && first.Load() {
				continue // forgets row 3, once
			}
			ids = append(ids, it.ID)
		}
		_, err := tx.NewUpdate().Model((*keepItem)(nil)).Set("attempts = attempts + 1").Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx)
		return err
	}, &bunqueue.QueueConfig[keepItem]{BatchSize: 5})
	newClient(t, db, q)
	ok, err := q.ProcessNext(t.Context())
	require.True(t, ok)
	require.NoError(t, err, "a batch of one")
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_test_batch_keep WHERE status = 'done'"))

	// ProcessNext takes one row at a time; run the rest as a batch.
	c := newClient(t, dbtest.Open(t, 0), bunqueue.NewBatchQueue("batch-keep-2", batchQuery, func(ctx context.Context, tx bun.Tx, items []keepItem) error {
		var ids []int64
		for _, it := range items {
			if it.ID == 3 && first.Load() {
				continue
			}
			ids = append(ids, it.ID)
		}
		first.Store(false)
		_, err := tx.NewUpdate().Model((*keepItem)(nil)).Set("attempts = attempts + 1").Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx)
		return err
	}, &bunqueue.QueueConfig[keepItem]{Workers: 1, BatchSize: 5, Cooldown: 50 * time.Millisecond}))
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_batch_keep WHERE status = 'done'") == 5
	}, "every row done in the end")
	// The batch that kept row 3 was undone entirely: no row was updated
	// twice.
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bq_test_batch_keep WHERE attempts <> 1"), "each row's update committed once")
}
