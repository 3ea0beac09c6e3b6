package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Receipt is the args of a job that sends a receipt.
type Receipt struct {
	Order int `json:"order"`
}

// Kind implements bunqueue.JobArgs.
func (Receipt) Kind() string { return "example_receipt" }

// Tables gives a client tables of its own, here shop_q_jobs and the
// others, beside any other app's in the same database: migrate them with
// the same Tables the client is given.
func ExampleTables() {
	ctx := context.Background()
	db := openExampleDB("bq_example_shop", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_shop")
	tables := bunqueue.Tables{Prefix: "bq_example_shop_"}
	for _, name := range append(tables.Names(), "bq_example_shop_probe") {
		defer db.Exec("DROP TABLE IF EXISTS " + name)
	}
	fmt.Println(tables)
	if err := tables.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		Tables:       tables,
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{"receipts": {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	sent := make(chan int, 1)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Receipt](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Receipt]) error {
			sent <- job.Args.Order
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, Receipt{Order: 42}, &bunqueue.EnqueueOpts{Queue: "receipts"}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("receipt sent for order", <-sent)
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// bq_example_shop_jobs, bq_example_shop_failed_jobs, bq_example_shop_queues, bq_example_shop_periodic, bq_example_shop_slots, bq_example_shop_job_deps, bq_example_shop_sequences, bq_example_shop_processes, bq_example_shop_history, bq_example_shop_leases, bq_example_shop_migrations
	// receipt sent for order 42
}
