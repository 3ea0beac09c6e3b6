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
	"github.com/bunqueue/bunqueue/internal/dbtest"
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
	for from := 1; from <= items; from += 1000 {
		var vals []string
		for id := from; id < from+1000 && id <= items; id++ {
			vals = append(vals, fmt.Sprintf("(%d)", id))
		}
		dbtest.Exec(t, db, "INSERT INTO bq_test_once (id) VALUES "+strings.Join(vals, ","))
	}

	var (
		calls, overlaps, handlerErrs atomic.Int64
		inFlight                     sync.Map
	)
	query := func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}
	var cs []*bunqueue.Client
	for c := range clients {
		q := bunqueue.NewQueue("once", query, func(ctx context.Context, tx bun.Tx, it *onceItem) error {
			calls.Add(1)
			if _, busy := inFlight.LoadOrStore(it.ID, c); busy {
				overlaps.Add(1)
			}
			defer inFlight.Delete(it.ID)
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
	require.Zero(t, overlaps.Load(), "two workers held one item at once")
	require.Zero(t, handlerErrs.Load(), "a handler failed (a duplicate effect would fail here)")
	require.GreaterOrEqual(t, calls.Load(), int64(items))
	perClient := count(t, db, "SELECT COUNT(DISTINCT client) FROM bq_test_once_effect")
	require.Equal(t, clients, perClient, "every client took part")
}
