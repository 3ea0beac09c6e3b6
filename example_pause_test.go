package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Invoice is the args of a job that bills a customer.
type Invoice struct {
	N int `json:"n"`
}

// Kind implements bunqueue.JobArgs.
func (Invoice) Kind() string { return "example_invoice" }

// PauseQueue stops a queue in every process on the database (here, one)
// within a poll interval, while jobs may still be enqueued to it; they
// wait until ResumeQueue. Stats reports the flag.
func ExampleClient_PauseQueue() {
	ctx := context.Background()
	db := openExampleDB("bq_example_bill", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_bill")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_pause"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_queues WHERE name = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	billed := make(chan int, 10)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Invoice](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Invoice]) error {
			billed <- job.Args.N
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.PauseQueue(ctx, queue); err != nil { // before Start: it starts paused
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, Invoice{N: 1}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
		log.Fatal(err)
	}
	stats, err := client.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case n := <-billed:
		fmt.Println("billed while paused:", n)
	case <-time.After(500 * time.Millisecond):
		fmt.Printf("paused: %v, depth %d\n", stats[0].Paused, stats[0].Depth)
	}
	if err := client.ResumeQueue(ctx, queue); err != nil {
		log.Fatal(err)
	}
	fmt.Println("billed after the resume:", <-billed)
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// paused: true, depth 1
	// billed after the resume: 1
}
