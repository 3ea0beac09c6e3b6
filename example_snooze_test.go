package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// ExportReport is the args of a job that waits for its data.
type ExportReport struct {
	ReportID int64 `json:"report_id"`
}

// Kind implements bunqueue.JobArgs.
func (ExportReport) Kind() string { return "example_export_report" }

// A worker returns Snooze(d) when its job cannot run yet: the job runs
// again after d, by the database clock, without using an attempt. Here a
// report's data is ready a second after it is asked for, and its one
// attempt is not used up while it waits.
func ExampleSnooze() {
	ctx := context.Background()
	db := openExampleDB("bq_example_report", "id BIGINT PRIMARY KEY, ready_at DATETIME(6) NOT NULL")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_report")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_snooze"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	runs := make(chan string)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[ExportReport](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ExportReport]) error {
			var wait int64 // µs until the data is ready, by the database clock
			if err := db.NewRaw("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), ready_at) FROM bq_example_report WHERE id = ?",
				job.Args.ReportID).Scan(ctx, &wait); err != nil {
				return err
			}
			if wait > 0 {
				runs <- fmt.Sprintf("attempt %d of %d: not ready, snoozed", job.Attempt, job.MaxAttempts)
				return bunqueue.Snooze(time.Duration(wait) * time.Microsecond)
			}
			runs <- fmt.Sprintf("attempt %d of %d: exported", job.Attempt, job.MaxAttempts)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}

	if _, err := db.Exec("INSERT INTO bq_example_report (id, ready_at) VALUES (7, UTC_TIMESTAMP(6) + INTERVAL 1 SECOND)"); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, ExportReport{ReportID: 7}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-runs)
	fmt.Println(<-runs)
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 of 1: not ready, snoozed
	// attempt 1 of 1: exported
}
