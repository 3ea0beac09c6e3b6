package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// TranscribeVideo is the args of a job of minutes, too long to hold a
// transaction open for.
type TranscribeVideo struct {
	VideoID int64 `json:"video_id"`
}

// Kind implements bunqueue.JobArgs.
func (TranscribeVideo) Kind() string { return "example_transcribe_video" }

// In ModeLease a short transaction claims the job and sets a lease; the
// worker runs outside any transaction, with the client's *bun.DB; while it
// runs, heartbeats extend the lease every Lease/3; and its completion
// counts only if it still holds the lease. Writes the worker makes commit
// on their own (use db.RunInTx where several must be atomic).
func ExampleJobQueueConfig_lease() {
	ctx := context.Background()
	db := openExampleDB("bq_example_transcript", "video_id BIGINT PRIMARY KEY, text TEXT NOT NULL")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_transcript")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "bq_example_lease"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues: map[string]bunqueue.JobQueueConfig{
			queue: {Mode: bunqueue.ModeLease, Lease: 3 * time.Second},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	seen := make(chan string, 100) // room for a retry's too, should a lease be lost: no send may block Stop
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[TranscribeVideo](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[TranscribeVideo]) error {
			_, inTx := db.(bun.Tx)
			seen <- fmt.Sprint("in a transaction: ", inTx)

			// While leased, the job has a lease token, and its run_at is
			// the lease's end.
			var lease struct {
				Leased bool
				Until  time.Time
			}
			readLease := func() error {
				return db.NewRaw("SELECT lease_token IS NOT NULL AS leased, run_at AS until FROM bunqueue_jobs WHERE id = ?", job.ID).
					Scan(ctx, &lease)
			}
			if err := readLease(); err != nil {
				return err
			}
			seen <- fmt.Sprint("leased: ", lease.Leased)

			// The work of minutes; meanwhile a heartbeat extends the lease.
			first := lease.Until
			for !lease.Until.After(first) {
				select {
				case <-ctx.Done(): // the lease was lost, or the client stops
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
				if err := readLease(); err != nil {
					return err
				}
			}
			seen <- "lease extended by a heartbeat"
			_, err := db.NewRaw("INSERT INTO bq_example_transcript (video_id, text) VALUES (?, 'Hello, world.')", job.Args.VideoID).Exec(ctx)
			return err
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, db, TranscribeVideo{VideoID: 9}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		fmt.Println(<-seen)
	}
	if err := client.Stop(ctx); err != nil { // waits for the job's completion
		log.Fatal(err)
	}
	var transcripts, jobs int
	_ = db.NewRaw("SELECT COUNT(*) FROM bq_example_transcript").Scan(ctx, &transcripts)
	_ = db.NewRaw("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue).Scan(ctx, &jobs)
	fmt.Println("transcripts:", transcripts, "jobs left:", jobs)
	// Output:
	// in a transaction: false
	// leased: true
	// lease extended by a heartbeat
	// transcripts: 1 jobs left: 0
}
