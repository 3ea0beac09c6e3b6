package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// ChargeInvoice is the args of a job that charges an invoice.
type ChargeInvoice struct {
	Invoice int `json:"invoice"`
}

// Kind implements bunqueue.JobArgs.
func (ChargeInvoice) Kind() string { return "example_charge_invoice" }

// A job keeps the error of each failed attempt: one that failed twice
// and then completed shows both while Config.Retention keeps it, each
// with its number and when it failed, by the database clock.
func ExampleAttemptError() {
	ctx := context.Background()
	db := openExampleDB("bq_example_attempts", "id INT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_attempts")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_attempts"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		Retention:    time.Hour,
		Backoff:      func(int) time.Duration { return 10 * time.Millisecond },
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[ChargeInvoice](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ChargeInvoice]) error {
			switch job.Attempt {
			case 1:
				return fmt.Errorf("invoice %d: gateway timeout", job.Args.Invoice)
			case 2:
				return fmt.Errorf("invoice %d: gateway answered 502", job.Args.Invoice)
			}
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	res, err := client.Enqueue(ctx, db, ChargeInvoice{Invoice: 7}, &bunqueue.EnqueueOpts{Queue: queue})
	if err != nil {
		log.Fatal(err)
	}

	job, err := client.JobGet(ctx, res.ID)
	for err == nil && job.State != bunqueue.JobStateCompleted {
		time.Sleep(10 * time.Millisecond)
		job, err = client.JobGet(ctx, res.ID)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, last error %q\n", job.State, job.LastError)
	for i, a := range job.Errors {
		later := i == 0 || a.At.After(job.Errors[i-1].At)
		fmt.Printf("attempt %d: %s (UTC: %t, after the one before: %t)\n", a.Attempt, a.Error, a.At.Location() == time.UTC, later)
	}
	// Output:
	// completed, last error ""
	// attempt 1: invoice 7: gateway timeout (UTC: true, after the one before: true)
	// attempt 2: invoice 7: gateway answered 502 (UTC: true, after the one before: true)
}
