package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Entry is the args of one entry of an account's ledger.
type Entry struct {
	Name string `json:"name"`
}

// Kind implements bunqueue.JobArgs.
func (Entry) Kind() string { return "example_entry" }

// An account's entries run one at a time, in the order they were
// enqueued, however many workers there are: they share a Sequence key.
// The first fails for good once; it holds the sequence (the next entry
// stays blocked, and JobGet says for which job) until RetryFailed puts
// it back, and then the three run in order.
func ExampleEnqueueOpts_sequence() {
	ctx := context.Background()
	db := openExampleDB("bq_example_seq", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_seq")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "example_sequence"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 3}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 4)
	var failed atomic.Bool
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Entry](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Entry]) error {
			if job.Args.Name == "deposit 1" && failed.CompareAndSwap(false, true) {
				return bunqueue.Cancel(errors.New("the bank is offline"))
			}
			ran <- job.Args.Name
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}

	var ids []int64
	for _, name := range []string{"deposit 1", "deposit 2", "withdraw"} {
		res, err := client.Enqueue(ctx, db, Entry{Name: name}, &bunqueue.EnqueueOpts{Queue: queue, Sequence: "example-account-42"})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	var head []bunqueue.FailedJob
	for len(head) == 0 {
		time.Sleep(10 * time.Millisecond)
		if head, err = client.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue}); err != nil {
			log.Fatal(err)
		}
	}
	rec, err := client.JobGet(ctx, ids[1])
	if err != nil {
		log.Fatal(err)
	}
	dep := rec.Dependencies[0]
	fmt.Println("deposit 2 is", rec.State, "behind the failed deposit 1:", dep.JobID == ids[0] && dep.Policy == bunqueue.DependencyHold)

	if _, err := client.RetryFailed(ctx, head[0].ID); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		fmt.Println(<-ran)
	}
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// deposit 2 is blocked behind the failed deposit 1: true
	// deposit 1
	// deposit 2
	// withdraw
}
