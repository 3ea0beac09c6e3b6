package bunqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
)

// ResizeImage is the args of a job whose completion is worth keeping for
// a while, to see what ran.
type ResizeImage struct {
	Path string `json:"path"`
}

// Kind implements bunqueue.JobArgs.
func (ResizeImage) Kind() string { return "example_resize_image" }

// With Config.Retention a completed job is not deleted as it completes:
// it stays in bunqueue_jobs as completed, with its completed_at and its
// unique key released, until a cleaner of the started client deletes it
// once the retention has passed.
//
// The cleaner deletes only the completed jobs of the queues its client
// runs, each once older than its queue's retention
// (JobQueueConfig.Retention, by default Config.Retention).
func ExampleConfig_retention() {
	ctx := context.Background()
	dsn, err := mysql.ParseDSN(exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	admin, err := sql.Open("mysql", exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS bq_example_retention", "CREATE DATABASE bq_example_retention"} {
		if _, err := admin.Exec(stmt); err != nil {
			log.Fatal(err)
		}
	}
	defer admin.Exec("DROP DATABASE bq_example_retention")
	dsn.DBName = "bq_example_retention"
	sqldb, err := sql.Open("mysql", dsn.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, mysqldialect.New())
	defer db.Close()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}

	const queue, retention = "bq_example_retention", 2 * time.Second
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
		Retention:    retention,
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[ResizeImage](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[ResizeImage]) error {
			close(done)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	job, err := client.Enqueue(ctx, db, ResizeImage{Path: "cat.png"}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "bq_example:resize:cat.png"})
	if err != nil {
		log.Fatal(err)
	}
	<-done

	// The job's completion commits once the worker has returned.
	var kept []struct {
		State     int // 1: completed
		Completed bool
		UniqueKey *string
	}
	for len(kept) == 0 || kept[0].State != 1 {
		time.Sleep(10 * time.Millisecond)
		if err := db.NewRaw("SELECT state, completed_at IS NOT NULL AS completed, unique_key FROM bunqueue_jobs WHERE id = ?", job.ID).
			Scan(ctx, &kept); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("kept as completed:", kept[0].Completed, "unique key released:", kept[0].UniqueKey == nil)

	// The cleaner looks for completed jobs past the retention from time
	// to time, while the client runs.
	for {
		var left int
		if err := db.NewRaw("SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", job.ID).Scan(ctx, &left); err != nil {
			log.Fatal(err)
		}
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("deleted by the cleaner")
	// Output:
	// kept as completed: true unique key released: true
	// deleted by the cleaner
}
