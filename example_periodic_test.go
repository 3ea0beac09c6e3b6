package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// NightlyReport is the args of a job that runs every night.
type NightlyReport struct{}

// Kind implements bunqueue.JobArgs.
func (NightlyReport) Kind() string { return "example_nightly_report" }

// Sweep is the args of a job that runs every second.
type Sweep struct{}

// Kind implements bunqueue.JobArgs.
func (Sweep) Kind() string { return "example_sweep" }

// Periodic jobs are listed in Config.PeriodicJobs of every process that
// should keep them: each tick is enqueued once, whichever process comes
// first. A cron expression is read in its Location (UTC if nil);
// RunOnStart runs a schedule new to the database at once. A job's RunAt
// is its tick. A schedule that cannot run is refused by NewClient, which
// names the field.
func ExamplePeriodicJob() {
	ctx := context.Background()
	db := openExampleDB("bq_example_periodic", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_periodic")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_periodic"
	names := []string{"example_nightly_report", "example_sweep"}
	forget := func() { // the schedules' records, so that the example runs anew
		db.Exec("DELETE FROM bunqueue_periodic WHERE name IN (?)", bun.List(names))
		db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	}
	forget()
	defer forget()

	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		log.Fatal(err)
	}
	opts := &bunqueue.EnqueueOpts{Queue: queue}
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}},
		PeriodicJobs: []bunqueue.PeriodicJob{
			{Name: names[0], Cron: "30 2 * * *", Location: paris, Args: NightlyReport{}, Opts: opts, RunOnStart: true},
			{Name: names[1], Every: time.Second, Args: Sweep{}, Opts: opts},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 10)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[NightlyReport](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[NightlyReport]) error {
			ran <- "nightly report"
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Sweep](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Sweep]) error {
			ran <- "sweep"
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-ran) // at once: RunOnStart
	fmt.Println(<-ran) // a second later
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	_, err = bunqueue.NewClient(db, &bunqueue.Config{PeriodicJobs: []bunqueue.PeriodicJob{
		{Name: "example_bad", Cron: "every night", Args: NightlyReport{}},
	}})
	fmt.Println(err)
	// Output:
	// nightly report
	// sweep
	// bunqueue: Config.PeriodicJobs[0] ("example_bad").Cron: "every night" is not a cron expression: expected 5 to 6 fields, found 2: [every night]
}
