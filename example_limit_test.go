package bunqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
)

// Export is the args of a job that calls a partner's API, which takes
// two calls at a time.
type Export struct {
	N int `json:"n"`
}

// Kind implements bunqueue.JobArgs.
func (Export) Kind() string { return "example_export" }

// GlobalLimit runs at most that many of a queue's jobs at once, across
// every process that runs the queue (here, two clients on pools of their
// own, as two app servers, of four workers each).
func ExampleJobQueueConfig_globalLimit() {
	ctx := context.Background()
	db := openExamplePool()
	defer db.Close()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_limit"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_slots WHERE queue = ?", queue)

	var mu sync.Mutex
	running, most, done := 0, 0, 0
	export := func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Export]) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the partner's API
		mu.Lock()
		running--
		done++
		mu.Unlock()
		return nil
	}
	var clients []*bunqueue.Client
	for range 2 {
		server := openExamplePool()
		defer server.Close()
		client, err := bunqueue.NewClient(server, &bunqueue.Config{
			PollInterval: 50 * time.Millisecond,
			JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 4, GlobalLimit: 2}},
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[Export](export)); err != nil {
			log.Fatal(err)
		}
		clients = append(clients, client)
	}
	for n := range 20 {
		if _, err := clients[0].Enqueue(ctx, db, Export{N: n}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
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
		finished := done == 20
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
	fmt.Printf("%d exports, at most %d at once\n", done, most)
	// Output:
	// 20 exports, at most 2 at once
}

// openExamplePool opens a pool of its own on the example database, as
// one app server would.
func openExamplePool() *bun.DB {
	sqldb, err := sql.Open("mysql", exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	return bun.NewDB(sqldb, mysqldialect.New())
}
