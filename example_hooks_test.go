package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Lifecycle hooks run around every handler of a queue (QueueConfig.Hooks),
// or of every queue and jobs queue of a client (Config.Hooks), with the
// handler's context and result: for logs, metrics or a kill switch.
func ExampleQueueConfig_hooks() {
	type Image struct {
		bun.BaseModel `bun:"table:bq_example_hooks"`
		ID            int64 `bun:",pk"`
		Path          string
		Resized       bool
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_hooks", "id BIGINT PRIMARY KEY, path VARCHAR(255) NOT NULL, resized BOOL NOT NULL DEFAULT FALSE, INDEX (resized, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_hooks")
	if _, err := db.Exec("INSERT INTO bq_example_hooks (id, path) VALUES (1, 'cat.png'), (2, 'broken.png')"); err != nil {
		log.Fatal(err)
	}

	// logHook prints each item before and after its handler; either of
	// its functions may be left nil.
	logHook := bunqueue.Hook{
		// An error from WorkBegin would skip the handler and fail the
		// item with it.
		WorkBegin: func(ctx context.Context, info *bunqueue.WorkInfo) error {
			fmt.Println("begin", info.Queue, info.Key)
			return nil
		},
		// WorkEnd returns the result to act on: err itself, to observe
		// only.
		WorkEnd: func(ctx context.Context, info *bunqueue.WorkInfo, err error) error {
			fmt.Println("end", info.Queue, info.Key, "error:", err)
			return err
		},
	}
	images := bunqueue.NewQueue("bq_example_images",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("resized = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, img *Image) error {
			fmt.Println("  resizing", img.Path)
			if img.Path == "broken.png" {
				return errors.New("not an image")
			}
			_, err := tx.NewUpdate().Model(img).Set("resized = TRUE").WherePK().Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[Image]{Hooks: []bunqueue.Hook{logHook}})
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(images); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		_, _ = images.ProcessNext(ctx)
	}
	// Output:
	// begin bq_example_images id=1
	//   resizing cat.png
	// end bq_example_images id=1 error: <nil>
	// begin bq_example_images id=2
	//   resizing broken.png
	// end bq_example_images id=2 error: not an image
}
