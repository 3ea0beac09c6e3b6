package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Ping is the args of a job that calls a partner's API, which takes at
// most 5 calls in any 500 ms.
type Ping struct {
	N int `json:"n"`
}

// Kind implements bunqueue.JobArgs.
func (Ping) Kind() string { return "example_ping" }

// RateLimit starts at most N of a queue's jobs in any period of Per,
// across every process that runs the queue (here, two clients on pools of
// their own, as two app servers, of four workers each): 15 jobs at 5 per
// 500 ms take three periods.
func ExampleJobQueueConfig_rateLimit() {
	ctx := context.Background()
	db := openExamplePool()
	defer db.Close()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_rate"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_slots WHERE queue = ?", queue)

	rate := bunqueue.Rate{N: 5, Per: 500 * time.Millisecond}
	var mu sync.Mutex
	var starts []time.Time
	ping := func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Ping]) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	}
	var clients []*bunqueue.Client
	for range 2 {
		server := openExamplePool()
		defer server.Close()
		client, err := bunqueue.NewClient(server, &bunqueue.Config{
			PollInterval: 50 * time.Millisecond,
			JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 4, RateLimit: rate}},
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[Ping](ping)); err != nil {
			log.Fatal(err)
		}
		clients = append(clients, client)
	}
	for n := range 15 {
		if _, err := clients[0].Enqueue(ctx, db, Ping{N: n}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
			log.Fatal(err)
		}
	}
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		finished := len(starts) == 15
		mu.Unlock()
		if finished {
			break
		}
	}
	for _, c := range clients {
		if err := c.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	kept := true // starts N apart are at least about Per apart
	for i := 0; i+rate.N < len(starts); i++ {
		kept = kept && starts[i+rate.N].Sub(starts[i]) > rate.Per/2 // a start lags its slot a little
	}
	fmt.Printf("%d pings, at most %d in any %s: %v\n", len(starts), rate.N, rate.Per, kept)
	// Output:
	// 15 pings, at most 5 in any 500ms: true
}
