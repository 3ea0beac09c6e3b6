package bunqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
)

// RebuildSearchIndex is the args of a job that is worth running once
// however many times it is asked for.
type RebuildSearchIndex struct {
	ShopID int64 `json:"shop_id"`
}

// Kind implements bunqueue.JobArgs.
func (RebuildSearchIndex) Kind() string { return "example_rebuild_search_index" }

// A UniqueKey makes a job unique while it is pending: enqueueing another
// with the same key returns the pending job, marked Duplicate, and inserts
// nothing. The key is free again once the job has completed (or failed
// for good). Keys are unique across the whole jobs table, every queue and
// kind, so they name what they stand for in full.
func ExampleClient_Enqueue_uniqueKey() {
	ctx := context.Background()
	sqldb, err := sql.Open("mysql", exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, mysqldialect.New())
	defer db.Close()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_unique"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	rebuilt := make(chan int64)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[RebuildSearchIndex](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[RebuildSearchIndex]) error {
			rebuilt <- job.Args.ShopID
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	rebuild := func(shopID int64) bunqueue.EnqueueResult {
		res, err := client.Enqueue(ctx, db, RebuildSearchIndex{ShopID: shopID}, &bunqueue.EnqueueOpts{
			Queue:     queue,
			UniqueKey: fmt.Sprintf("bq_example:search-index:shop-%d", shopID),
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}

	// Three product updates ask for a rebuild before any worker runs.
	first := rebuild(1)
	fmt.Println("first: duplicate:", first.Duplicate)
	for range 2 {
		res := rebuild(1)
		fmt.Println("again: duplicate:", res.Duplicate, "same job:", res.ID == first.ID)
	}

	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rebuilt shop", <-rebuilt)
	if err := client.Stop(ctx); err != nil { // lets the job's completion commit
		log.Fatal(err)
	}

	// The job completed, so its key is free.
	fmt.Println("after it ran: duplicate:", rebuild(1).Duplicate)
	// Output:
	// first: duplicate: false
	// again: duplicate: true same job: true
	// again: duplicate: true same job: true
	// rebuilt shop 1
	// after it ran: duplicate: false
}
