package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// ChargeCard is the args of a job that charges a customer's card.
type ChargeCard struct {
	OrderID int64 `json:"order_id"`
	Cents   int   `json:"cents"`
}

// Kind implements bunqueue.JobArgs.
func (ChargeCard) Kind() string { return "example_charge_card" }

// A worker returns Cancel(err) for an error that retrying cannot fix: the
// job moves to the failed jobs at once, whatever attempts it had left,
// and in lock mode the writes the worker made through its db are undone.
func ExampleCancel() {
	ctx := context.Background()
	db := openExampleDB("bq_example_charge", "order_id BIGINT PRIMARY KEY, cents INT NOT NULL")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_charge")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_cancel"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[ChargeCard](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ChargeCard]) error {
			defer close(done)
			if _, err := db.NewRaw("INSERT INTO bq_example_charge (order_id, cents) VALUES (?, ?)",
				job.Args.OrderID, job.Args.Cents).Exec(ctx); err != nil {
				return err
			}
			// The payment provider refuses the card: no retry will help.
			return bunqueue.Cancel(errors.New("card expired"))
		}))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, ChargeCard{OrderID: 42, Cents: 1999},
		&bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 5}); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-done
	if err := client.Stop(ctx); err != nil { // lets the job's transaction commit
		log.Fatal(err)
	}

	failed, err := client.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range failed {
		fmt.Printf("%s %s: attempt %d of %d: %s\n", f.Kind, f.Args, f.Attempts, f.MaxAttempts, f.Error)
	}
	var charges int
	if err := db.NewRaw("SELECT COUNT(*) FROM bq_example_charge").Scan(ctx, &charges); err != nil {
		log.Fatal(err)
	}
	fmt.Println("charges written:", charges)
	// Output:
	// example_charge_card {"order_id":42,"cents":1999}: attempt 1 of 5: bunqueue: job cancelled: card expired
	// charges written: 0
}
