package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type kindItem struct {
	bun.BaseModel `bun:"table:bq_test_kinds"`
	ID            int64 `bun:",pk"`
	Kind          string
	Status        string
}

// One table, two queues with different queries, in one client.
func TestTwoQueuesOverOneTable(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_kinds", "id BIGINT PRIMARY KEY, kind VARCHAR(8) NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (kind, status, id)")
	for i := 1; i <= 40; i++ {
		kind := "a"
		if i%4 == 0 {
			kind = "b"
		}
		dbtest.Exec(t, db, fmt.Sprintf("INSERT INTO bq_test_kinds (id, kind) VALUES (%d, '%s')", i, kind))
	}
	var mu sync.Mutex
	seen := map[string][]int64{}
	queue := func(kind string) *bunqueue.Queue[kindItem] {
		return bunqueue.NewQueue("kind-"+kind,
			func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("kind = ?", kind).Where("status = 'waiting'").Order("id")
			},
			func(ctx context.Context, tx bun.Tx, it *kindItem) error {
				if it.Kind != kind {
					return fmt.Errorf("queue %s got a row of kind %s", kind, it.Kind)
				}
				mu.Lock()
				seen[kind] = append(seen[kind], it.ID)
				mu.Unlock()
				_, err := tx.NewUpdate().Model(it).Set("status = ?", "done-"+kind).WherePK().Exec(ctx)
				return err
			}, &bunqueue.QueueConfig[kindItem]{Workers: 2, BatchSize: 4})
	}
	a, b := queue("a"), queue("b")
	start(t, newClient(t, db, a, b))
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_kinds WHERE status = 'waiting'") == 0
	}, "both queues drain")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen["a"], 30)
	require.Len(t, seen["b"], 10)
	require.Equal(t, 30, count(t, db, "SELECT COUNT(*) FROM bq_test_kinds WHERE kind = 'a' AND status = 'done-a'"))
	require.Equal(t, 10, count(t, db, "SELECT COUNT(*) FROM bq_test_kinds WHERE kind = 'b' AND status = 'done-b'"))
}

type tenantItem struct {
	bun.BaseModel `bun:"table:bq_test_tenant"`
	TenantID      int64 `bun:",pk"`
	ID            int64 `bun:",pk"`
	Status        string
}

// A model with a composite primary key: claims, the leave-the-query
// re-check and the cooldown all work on both columns.
func TestCompositePrimaryKey(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_tenant", "tenant_id BIGINT NOT NULL, id BIGINT NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'waiting', PRIMARY KEY (tenant_id, id), INDEX (status, tenant_id, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_tenant (tenant_id, id) VALUES (1, 1), (1, 2), (2, 1), (2, 2)")
	var mu sync.Mutex
	calls := map[[2]int64]int{}
	q := bunqueue.NewQueue("tenant",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").Order("tenant_id", "id")
		},
		func(ctx context.Context, tx bun.Tx, it *tenantItem) error {
			mu.Lock()
			calls[[2]int64{it.TenantID, it.ID}]++
			mu.Unlock()
			switch {
			case it.TenantID == 1 && it.ID == 2:
				return nil // stays in the queue: the re-check must catch (1, 2) and not (2, 2)
			case it.TenantID == 2 && it.ID == 1:
				return errors.New("fails") // no OnError: cooled down
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[tenantItem]{Cooldown: time.Hour})
	newClient(t, db, q)
	var errs []error
	for {
		ok, err := q.ProcessNext(t.Context())
		if !ok {
			require.NoError(t, err)
			break
		}
		errs = append(errs, err)
	}
	require.Equal(t, map[[2]int64]int{{1, 1}: 1, {1, 2}: 1, {2, 1}: 1, {2, 2}: 1}, calls, "each row once: failed rows cool down")
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], bunqueue.ErrStillQueued)
	require.ErrorContains(t, errs[1], "tenant_id=1,id=2")
	require.ErrorContains(t, errs[2], "fails")
	require.NoError(t, errs[3])
	require.Equal(t, 2, count(t, db, "SELECT COUNT(*) FROM bq_test_tenant WHERE status = 'done'"))
}
