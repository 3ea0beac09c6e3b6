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

// WelcomeEmail is the args of a job: its Kind names its worker.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind implements bunqueue.JobArgs.
func (WelcomeEmail) Kind() string { return "example_welcome_email" }

// Transactional enqueue: a job enqueued through the transaction of the
// business write exists if and only if that transaction commits.
func ExampleClient_Enqueue() {
	type User struct {
		bun.BaseModel `bun:"table:bq_example_user"`
		ID            int64 `bun:",pk,autoincrement"`
		Email         string
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_user", "id BIGINT AUTO_INCREMENT PRIMARY KEY, email VARCHAR(255) NOT NULL")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_user")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	// A queue of this example's own, so that it only runs its own jobs.
	const queue = "example_welcome"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	sent := make(chan int64)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[WelcomeEmail](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[WelcomeEmail]) error {
			sent <- job.Args.UserID
			return nil // completes the job, in the job's transaction
		}))
	if err != nil {
		log.Fatal(err)
	}

	signup := func(email string, fail bool) error {
		return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			user := &User{Email: email}
			if _, err := tx.NewInsert().Model(user).Exec(ctx); err != nil {
				return err
			}
			if _, err := client.Enqueue(ctx, tx, WelcomeEmail{UserID: user.ID}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
				return err
			}
			if fail {
				return errors.New("payment declined") // rolls back the user and the job
			}
			return nil
		})
	}
	fmt.Println("ada:", signup("ada@example.com", false))
	fmt.Println("eve:", signup("eve@example.com", true))

	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("welcome email sent to user", <-sent)
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Stop(stop); err != nil {
		log.Fatal(err)
	}
	var users, jobs int
	_ = db.NewRaw("SELECT COUNT(*) FROM bq_example_user").Scan(ctx, &users)
	_ = db.NewRaw("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue).Scan(ctx, &jobs)
	fmt.Println("users:", users, "jobs left:", jobs)
	// Output:
	// ada: <nil>
	// eve: payment declined
	// welcome email sent to user 1
	// users: 1 jobs left: 0
}
