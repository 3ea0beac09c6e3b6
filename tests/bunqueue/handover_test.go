package bunqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

type handArgs struct {
	N int `json:"n"`
}

func (handArgs) Kind() string { return "t_handover" }

// A job enqueued through the *bun.DB of the client that runs its queue,
// due now, is handed to the queue's feed when its INSERT has committed: a
// worker claims it by its key, and the feed reads nothing (counted at the
// driver, with an idle poll of an hour so that nothing else reads). One
// enqueued in a transaction, one due later and a duplicate go the usual
// way: the first is read once its commit wakes the feed.
func TestEnqueuedJobsAreHandedOver(t *testing.T) {
	t.Parallel()
	admin := migrated(t, 0)
	queue := ownJobQueue(t, admin)
	in := faultdriver.NewInjector(1)
	in.Add(faultdriver.Rule{Step: "read", Match: faultdriver.Contains(nil, "bunqueue: read "+queue), Faults: []faultdriver.Fault{faultdriver.Deadlock}})
	db := relFaultDB(t, in, 0)
	c := jobsTestClient(t, db, bunqueue.Config{
		PollInterval: time.Hour,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 4}},
	})
	db.AddQueryHook(c.QueryHook())
	var mu sync.Mutex
	ran := map[int]int{}
	started := make(chan int, 100)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[handArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[handArgs]) error {
		mu.Lock()
		ran[job.Args.N]++
		mu.Unlock()
		started <- job.Args.N
		return nil
	})))
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return in.Matched()["read"] > 0 }, "the feed's first read")
	reads := in.Matched()["read"]

	opts := &bunqueue.EnqueueOpts{Queue: queue}
	for n := 1; n <= 20; n++ {
		_, err := c.Enqueue(t.Context(), db, handArgs{N: n}, opts)
		require.NoError(t, err)
		require.Equal(t, n, <-started, "the job handed over started")
	}
	require.Equal(t, reads, in.Matched()["read"], "no read for the jobs handed over")

	// Through a transaction: no hand-over; its commit wakes the feed,
	// which reads the job.
	require.NoError(t, db.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := c.Enqueue(ctx, tx, handArgs{N: 21}, opts)
		return err
	}))
	require.Equal(t, 21, <-started)
	require.Greater(t, in.Matched()["read"], reads, "read after the commit")

	// Due later: not handed over, not started early.
	_, err := c.Enqueue(t.Context(), db, handArgs{N: 22}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	require.NoError(t, err)
	// A duplicate of a pending job hands nothing over.
	_, err = c.Enqueue(t.Context(), db, handArgs{N: 23}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour, UniqueKey: "u"})
	require.NoError(t, err)
	res, err := c.Enqueue(t.Context(), db, handArgs{N: 24}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "u"})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stop))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ran, 21, "jobs 1 to 21 ran; 22 to 24 did not")
	for n, runs := range ran {
		require.Equal(t, 1, runs, "job %d", n)
	}
	require.Equal(t, 2, count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "22 and 23 wait; 24 was a duplicate")
}
