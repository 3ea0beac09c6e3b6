package bunqueue_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type depthItem struct {
	bun.BaseModel `bun:"table:bq_test_depth"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// The queue depth gauge reports, at each collection, the rows waiting and
// not locked: here seven rows, one of them held by the worker.
func TestQueueDepthGauge(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_depth", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_depth (id) VALUES (1), (2), (3), (4), (5), (6), (7)")

	reader := sdkmetric.NewManualReader()
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger: testLogger(t), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)
	holding, release := make(chan struct{}), make(chan struct{})
	q := bunqueue.NewQueue("depth",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *depthItem) error {
			if it.ID == 1 {
				close(holding)
				<-release
			}
			_, err := tx.NewUpdate().Model(it).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[depthItem]{Workers: 1})
	require.NoError(t, c.Add(q))

	depth := func() (int64, bool) {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "bunqueue.queue.depth" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					if v, _ := dp.Attributes.Value("messaging.destination.name"); v.AsString() == "depth" {
						return dp.Value, true
					}
				}
			}
		}
		return 0, false
	}
	_, found := depth()
	require.False(t, found, "no gauge before Start")

	start(t, c)
	<-holding
	var once sync.Once
	defer once.Do(func() { close(release) }) // even if an assertion fails: Stop waits for the handler
	n, found := depth()
	require.True(t, found)
	require.Equal(t, int64(6), n, "seven waiting, one locked by the worker")
	once.Do(func() { close(release) })
}
