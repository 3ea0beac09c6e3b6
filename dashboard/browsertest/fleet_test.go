package browsertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Two clients on pools of their own, as two app servers, share a queue:
// the overview of either charts the whole fleet's processed jobs by
// default, and, with scope=process, only those of its own process.
func TestOverviewChartsFleet(t *testing.T) {
	t.Parallel()
	tables := bunqueue.Tables{Prefix: dbtest.Name("dfl") + "_"}
	admin := dbtest.Open(t, 0)
	require.NoError(t, tables.Migrate(t.Context(), admin))
	t.Cleanup(func() {
		for _, name := range append(tables.Names(), tables.Prefix+"probe") {
			_, _ = admin.Exec("DROP TABLE IF EXISTS " + name)
		}
	})
	queue := dbtest.Name("fleetq")
	ran := make([]atomic.Int64, 2)
	clients := make([]*bunqueue.Client, 2)
	for i := range clients {
		c, err := bunqueue.NewClient(dbtest.Open(t, 0), &bunqueue.Config{Tables: tables, PollInterval: 50 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond, JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}}})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[chartArgs](func(context.Context, bun.IDB, *bunqueue.Job[chartArgs]) error {
			ran[i].Add(1)
			return nil
		})))
		require.NoError(t, c.Start(t.Context()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, c.Stop(ctx))
		})
		clients[i] = c
	}
	const jobs = 12
	for range jobs {
		_, err := clients[0].Enqueue(t.Context(), admin, chartArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return ran[0].Load()+ran[1].Load() == jobs }, 15*time.Second, 20*time.Millisecond, "the jobs ran")
	srv := httptest.NewServer(dashboard.New(clients[0], nil))
	t.Cleanup(srv.Close)
	processed := func(query string) int64 {
		res, err := http.Get(srv.URL + "/" + query)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return tipsSum(t, chartOf(t, chartsOf(t, string(b), queue), "processed"), "processed")
	}
	require.Eventually(t, func() bool { return processed("") == jobs }, 10*time.Second, 50*time.Millisecond,
		"the fleet's jobs, both processes', within a heartbeat")
	require.Equal(t, ran[0].Load(), processed("?scope=process"), "this process's jobs")
}
