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

// SendNewsletter is the args of a job that mails a newsletter.
type SendNewsletter struct {
	Issue int `json:"issue"`
}

// Kind implements bunqueue.JobArgs.
func (SendNewsletter) Kind() string { return "example_send_newsletter" }

// A job that used up its attempts is kept in the failed jobs, with its
// payload and last error. FailedJobs lists them, newest first;
// RetryFailed puts one back in its queue with a fresh set of attempts
// (once the mail server is back, say); DeleteFailed drops one for good.
func ExampleClient_RetryFailed() {
	ctx := context.Background()
	db := openExampleDB("bq_example_smtp", "id INT PRIMARY KEY, up BOOL NOT NULL")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_smtp")
	if _, err := db.Exec("INSERT INTO bq_example_smtp (id, up) VALUES (1, FALSE)"); err != nil {
		log.Fatal(err)
	}
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_failed"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	runs := make(chan string)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[SendNewsletter](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[SendNewsletter]) error {
			var up bool
			if err := db.NewRaw("SELECT up FROM bq_example_smtp WHERE id = 1").Scan(ctx, &up); err != nil {
				return err
			}
			if !up {
				runs <- fmt.Sprintf("issue %d, attempt %d: connection refused", job.Args.Issue, job.Attempt)
				return errors.New("smtp: connection refused")
			}
			runs <- fmt.Sprintf("issue %d, attempt %d: sent", job.Args.Issue, job.Attempt)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, SendNewsletter{Issue: 12}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-runs)

	// The failure commits once the worker has returned.
	var failed []bunqueue.FailedJob
	for len(failed) == 0 {
		time.Sleep(10 * time.Millisecond)
		if failed, err = client.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue}); err != nil {
			log.Fatal(err)
		}
	}
	f := failed[0]
	fmt.Printf("failed: %s %s after %d of %d attempts: %s\n", f.Kind, f.Args, f.Attempts, f.MaxAttempts, f.Error)

	if _, err := db.Exec("UPDATE bq_example_smtp SET up = TRUE WHERE id = 1"); err != nil {
		log.Fatal(err)
	}
	newID, err := client.RetryFailed(ctx, f.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("back in the queue as a new job:", newID != f.JobID)
	fmt.Println(<-runs)
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	failed, err = client.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("failed jobs:", len(failed))
	// Output:
	// issue 12, attempt 1: connection refused
	// failed: example_send_newsletter {"issue":12} after 1 of 1 attempts: smtp: connection refused
	// back in the queue as a new job: true
	// issue 12, attempt 1: sent
	// failed jobs: 0
}
