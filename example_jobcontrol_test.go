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

// Report is the args of a job that builds a report.
type Report struct {
	Month string `json:"month"`
}

// Kind implements bunqueue.JobArgs.
func (Report) Kind() string { return "example_report" }

// JobGet, JobList, JobRunNow and JobCancel: an operator finds a
// scheduled job, makes it due now, and cancels another, which stays
// visible as a failed job until RetryFailed or JobDelete; a search
// finds each by its args or its error.
func ExampleClient_JobList() {
	ctx := context.Background()
	db := openExampleDB("bq_example_jobctl", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_jobctl")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_jobctl"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	defer db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	client, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	if err != nil {
		log.Fatal(err)
	}
	var ids []int64
	for _, month := range []string{"2026-01", "2026-02"} {
		res, err := client.Enqueue(ctx, db, Report{Month: month}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, res.ID)
	}

	page, err := client.JobList(ctx, bunqueue.JobListFilter{Queue: queue, States: []bunqueue.JobState{bunqueue.JobStateScheduled}})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range page.Jobs { // newest first
		fmt.Println(j.Kind, string(j.Args), j.State)
	}
	if err := client.JobRunNow(ctx, ids[0]); err != nil {
		log.Fatal(err)
	}
	was, err := client.JobCancel(ctx, ids[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled a job that was", was)
	for _, id := range ids {
		j, err := client.JobGet(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s %q\n", j.Args, j.State, j.LastError)
	}
	// A search finds a text in the args or the error, either case.
	for _, text := range []string{`"month":"2026-01"`, "CANCELLED WITH"} {
		page, err := client.JobList(ctx, bunqueue.JobListFilter{Queue: queue, Search: text})
		if err != nil {
			log.Fatal(err)
		}
		for _, j := range page.Jobs {
			fmt.Printf("%s: %s %s\n", text, j.Args, j.State)
		}
	}
	if err := client.JobDelete(ctx, ids[1]); err != nil {
		log.Fatal(err)
	}
	_, err = client.JobGet(ctx, ids[1])
	fmt.Println(errors.Is(err, bunqueue.ErrJobNotFound))
	// Output:
	// example_report {"month":"2026-02"} scheduled
	// example_report {"month":"2026-01"} scheduled
	// cancelled a job that was scheduled
	// {"month":"2026-01"} pending ""
	// {"month":"2026-02"} failed "bunqueue: cancelled with JobCancel"
	// "month":"2026-01": {"month":"2026-01"} pending
	// CANCELLED WITH: {"month":"2026-02"} failed
	// true
}

// Thumbnail is the args of a job that makes a thumbnail.
type Thumbnail struct {
	Image string `json:"image"`
}

// Kind implements bunqueue.JobArgs.
func (Thumbnail) Kind() string { return "example_thumbnail" }

// RecordOutput keeps a worker's result with its job: JobGet reads it
// once the job completed, for a day by default (OutputRetention), even
// where completed jobs are not kept (no Retention).
func ExampleRecordOutput() {
	ctx := context.Background()
	db := openExampleDB("bq_example_output", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_output")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_output"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 20 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Thumbnail](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Thumbnail]) error {
			return bunqueue.RecordOutput(ctx, map[string]string{"thumbnail": job.Args.Image + ".small.png"})
		}))
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Enqueue(ctx, db, Thumbnail{Image: "cat"}, &bunqueue.EnqueueOpts{Queue: queue})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	for {
		j, err := client.JobGet(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		if j.State == bunqueue.JobStateCompleted {
			fmt.Println(j.State, string(j.Output))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(errors.Is(bunqueue.RecordOutput(ctx, 1), bunqueue.ErrNotInWorker))
	// Output:
	// completed {"thumbnail":"cat.small.png"}
	// true
}
