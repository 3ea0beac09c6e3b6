package bunqueuetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/bunqueuetest"
)

// Receipt is the args of a job that emails the receipt of an order.
type Receipt struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

// Kind implements bunqueue.JobArgs.
func (Receipt) Kind() string { return "bunqueuetest_example_receipt" }

// exampleT stands in for the *testing.T of a test, which an example
// does not have: it prints a failure instead of ending the test.
type exampleT struct{ testing.TB }

func (exampleT) Helper() {}

func (exampleT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// A test of code that enqueues a job: the job is there, with the args and
// options the code gave it; run through the worker, it completes, and a
// receipt without an email address is cancelled.
func Example() {
	ctx := context.Background()
	const queue = "bq_example_bunqueuetest"
	db, client, done := exampleClient(queue, nil)
	defer done()
	err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[Receipt](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Receipt]) error {
			if job.Args.Email == "" {
				return bunqueue.Cancel(errors.New("the order has no email address"))
			}
			fmt.Println("sent the receipt of order", job.Args.OrderID, "to", job.Args.Email)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	t := exampleT{} // in a test: the test's t

	// The code under test enqueues the receipt with the order.
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := client.Enqueue(ctx, tx, Receipt{OrderID: 7, Email: "ada@example.com"},
			&bunqueue.EnqueueOpts{Queue: queue, Metadata: map[string]string{"source": "checkout"}})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	job := bunqueuetest.RequireEnqueued(ctx, t, db, Receipt{OrderID: 7},
		&bunqueuetest.RequireEnqueuedOpts{Queue: queue, Metadata: map[string]string{"source": "checkout"}})
	fmt.Println("enqueued for", job.Args.Email)
	res := bunqueuetest.WorkJob(ctx, t, client, job.ID)
	fmt.Println("outcome:", res.Outcome)
	bunqueuetest.RequireNotEnqueued(ctx, t, db, Receipt{OrderID: 7}, &bunqueuetest.RequireEnqueuedOpts{Queue: queue})

	res = bunqueuetest.Work(ctx, t, client, Receipt{OrderID: 8}, &bunqueue.EnqueueOpts{Queue: queue})
	fmt.Println("outcome:", res.Outcome, "-", res.Err)
	// Output:
	// enqueued for ada@example.com
	// sent the receipt of order 7 to ada@example.com
	// outcome: completed
	// outcome: cancelled - bunqueue: job cancelled: the order has no email address
}

// A job that fails is retried after the backoff; Work says when.
func ExampleWork() {
	ctx := context.Background()
	const queue = "bq_example_bunqueuetest_work"
	_, client, done := exampleClient(queue, func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute })
	defer done()
	err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[Receipt](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Receipt]) error {
			return errors.New("smtp: 451 try again later")
		}))
	if err != nil {
		log.Fatal(err)
	}

	res := bunqueuetest.Work(ctx, exampleT{}, client, Receipt{OrderID: 9, Email: "grace@example.com"},
		&bunqueue.EnqueueOpts{Queue: queue})
	fmt.Printf("attempt %d: %s in %s: %v\n", res.Attempt, res.Outcome, res.RetryIn, res.Err)
	// Output:
	// attempt 1: retried in 1m0s: smtp: 451 try again later
}

// exampleClient opens the examples' database, makes the jobs tables,
// and returns a client of one jobs queue, with backoff (nil: the
// default); done deletes the queue's jobs and closes the database.
func exampleClient(queue string, backoff func(attempt int) time.Duration) (db *bun.DB, client *bunqueue.Client, done func()) {
	db = openExampleDB()
	if err := bunqueue.Migrate(context.Background(), db); err != nil {
		log.Fatal(err)
	}
	clean := func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	}
	clean() // what an earlier run left
	client, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, Backoff: backoff})
	if err != nil {
		log.Fatal(err)
	}
	return db, client, func() { clean(); _ = db.Close() }
}

// openExampleDB opens the examples' database: BUNQUEUE_MYSQL_DSN, or
// root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC.
func openExampleDB() *bun.DB {
	dsn := os.Getenv("BUNQUEUE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
	}
	sqldb, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	return bun.NewDB(sqldb, mysqldialect.New())
}
