package bunqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type onceItem struct {
	bun.BaseModel `bun:"table:bq_test_once"`
	ID            int64 `bun:",pk"`
	Status        string
}

type onceEffect struct {
	bun.BaseModel `bun:"table:bq_test_once_effect"`
	ItemID        int64
	Client        int
}

// TestExactlyOnceDatabaseEffects runs three clients, each with its own
// connection pool as three processes would have, eight workers each, over
// 5,000 rows. Every handler writes an effect row (UNIQUE on the item id)
// and takes its item out of the queue in the same transaction.
func TestExactlyOnceDatabaseEffects(t *testing.T) {
	// Not parallel with the others: the two subtests share tables and
	// together load the server.
	for _, batch := range []int{1, 50} {
		t.Run(fmt.Sprintf("BatchSize=%d", batch), func(t *testing.T) {
			testExactlyOnce(t, batch)
		})
	}
}

func testExactlyOnce(t *testing.T, batch int) {
	const (
		items   = 5000
		clients = 3
		workers = 8
	)
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_once", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_once_effect", "item_id BIGINT NOT NULL, client INT NOT NULL, UNIQUE KEY (item_id)")
	insertIDs(t, db, "bq_test_once", items)

	var (
		calls, handlerErrs atomic.Int64
		held               holders
	)
	query := func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}
	var cs []*bunqueue.Client
	for c := range clients {
		q := bunqueue.NewQueue("once", query, func(ctx context.Context, tx bun.Tx, it *onceItem) error {
			calls.Add(1)
			defer held.hold(it.ID)()
			if _, err := tx.NewInsert().Model(&onceEffect{ItemID: it.ID, Client: c}).Exec(ctx); err != nil {
				handlerErrs.Add(1)
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			if err != nil {
				handlerErrs.Add(1)
			}
			return err
		}, &bunqueue.QueueConfig[onceItem]{Workers: workers, BatchSize: batch})
		client := newClient(t, dbtest.Open(t, workers+4), q)
		cs = append(cs, client)
	}
	started := time.Now()
	for _, c := range cs {
		start(t, c)
	}
	eventually(t, 90*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_once WHERE status = 'waiting'") == 0
	}, "the queue drains")
	t.Logf("batch %d: %d items in %s, %d handler calls", batch, items, time.Since(started).Round(time.Millisecond), calls.Load())

	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_once_effect"), "one effect per item")
	require.Equal(t, items, count(t, db, "SELECT COUNT(DISTINCT item_id) FROM bq_test_once_effect"))
	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_once WHERE status = 'done'"))
	require.Zero(t, held.overlaps.Load(), "two workers held one item at once")
	require.Zero(t, handlerErrs.Load(), "a handler failed (a duplicate effect would fail here)")
	require.GreaterOrEqual(t, calls.Load(), int64(items))
	perClient := count(t, db, "SELECT COUNT(DISTINCT client) FROM bq_test_once_effect")
	require.Equal(t, clients, perClient, "every client took part")
}

type retriedItem struct {
	bun.BaseModel `bun:"table:bq_test_retried"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
	RetryAt       *time.Time
}

// TestFailuresAcrossClients runs three clients with their own pools, four
// workers each, one row per transaction, over rows a third of which fail
// once. A failing handler writes its effect first (UNIQUE on the item):
// the failure must undo it. OnError records the failure (attempts + 1,
// a retry in 50 ms) while the row is still locked, so no other
// client can run the row again before its failure is recorded: every
// failing row fails once and is recorded once. Nothing may be lost,
// nothing done twice, and no row held by two handlers at once.
func TestFailuresAcrossClients(t *testing.T) {
	const (
		items   = 900
		clients = 3
		workers = 4
	)
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_retried", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, retry_at DATETIME(6) NULL, INDEX (status, id)")
	createTable(t, db, "bq_test_retried_effect", "item_id BIGINT NOT NULL, UNIQUE KEY (item_id)")
	insertIDs(t, db, "bq_test_retried", items)

	var (
		calls, failed, recorded, handlerErrs atomic.Int64
		held                                 holders
	)
	query := func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Where("retry_at IS NULL OR retry_at <= " + nowSQL(q)).Order("id")
	}
	var cs []*bunqueue.Client
	for range clients {
		q := bunqueue.NewQueue("retried", query, func(ctx context.Context, tx bun.Tx, it *retriedItem) error {
			calls.Add(1)
			defer held.hold(it.ID)()
			if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_retried_effect (item_id) VALUES (?)", it.ID); err != nil {
				handlerErrs.Add(1) // a failed attempt's effect was not undone
				return err
			}
			if it.ID%3 == 0 && it.Attempts == 0 {
				failed.Add(1)
				return fmt.Errorf("item %d: first attempt fails", it.ID)
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[retriedItem]{Workers: workers, BatchSize: 1,
			OnError: func(ctx context.Context, tx bun.Tx, it *retriedItem, _ error) error {
				_, err := tx.NewUpdate().Model(it).Set("attempts = attempts + 1").
					Set("retry_at = " + plusSQL(tx, 50*time.Millisecond)).WherePK().Exec(ctx)
				if err == nil {
					recorded.Add(1)
				}
				return err
			}})
		cs = append(cs, newClient(t, dbtest.Open(t, workers+4), q))
	}
	for _, c := range cs {
		start(t, c)
	}
	eventually(t, 60*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_retried WHERE status = 'waiting'") == 0
	}, "the queue drains")
	t.Logf("%d handler calls, %d failures, %d recorded", calls.Load(), failed.Load(), recorded.Load())

	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_retried_effect"), "one effect per item: a failure's was undone")
	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_retried WHERE status = 'done'"))
	require.Zero(t, handlerErrs.Load(), "a failed attempt's effect was not undone")
	require.Zero(t, held.overlaps.Load(), "two handlers held one item at once")
	require.Equal(t, items/3, count(t, db, "SELECT COUNT(*) FROM bq_test_retried WHERE attempts = 1 AND MOD(id, 3) = 0"),
		"a failing row's failure was not recorded, or recorded twice")
	require.Equal(t, items/3, count(t, db, "SELECT COALESCE(SUM(attempts), 0) FROM bq_test_retried"))
	require.Equal(t, int64(items/3), failed.Load(), "a row ran again before its failure was recorded")
	require.Equal(t, int64(items/3), recorded.Load())
	require.Equal(t, int64(items+items/3), calls.Load())
}

// insertIDs inserts rows 1 … n (their other columns default) into table.
func insertIDs(t *testing.T, db *bun.DB, table string, n int) {
	t.Helper()
	for from := 1; from <= n; from += 1000 {
		var vals []string
		for id := from; id < from+1000 && id <= n; id++ {
			vals = append(vals, fmt.Sprintf("(%d)", id))
		}
		dbtest.Exec(t, db, "INSERT INTO "+table+" (id) VALUES "+strings.Join(vals, ","))
	}
}

// holders counts the handler runs that began on an item another run was
// still on.
type holders struct {
	running  sync.Map
	overlaps atomic.Int64
}

// hold marks a run of item begun and returns what marks it ended.
func (h *holders) hold(item int64) func() {
	if _, busy := h.running.LoadOrStore(item, true); busy {
		h.overlaps.Add(1)
	}
	return func() { h.running.Delete(item) }
}
