package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Client.QueryHook wakes this process's sleeping workers when a write
// through the hooked DB may have put rows in their queue, so that work
// made in-process starts at once instead of at the next poll. Here the
// queue polls once an hour, and a row inserted through the hooked DB is
// processed right away. Writes from other processes are still found by
// polling.
func ExampleClient_QueryHook() {
	type Invoice struct {
		bun.BaseModel `bun:"table:bq_example_invoice"`
		ID            int64 `bun:",pk,autoincrement"`
		Customer      string
		Sent          bool
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_invoice", "id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(255) NOT NULL, sent BOOL NOT NULL DEFAULT FALSE, INDEX (sent, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_invoice")

	sent := make(chan string)
	invoices := bunqueue.NewQueue("bq_example_invoices",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("sent = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, inv *Invoice) error {
			if _, err := tx.NewUpdate().Model(inv).Set("sent = TRUE").WherePK().Exec(ctx); err != nil {
				return err
			}
			sent <- inv.Customer
			return nil
		},
		&bunqueue.QueueConfig[Invoice]{PollInterval: time.Hour})
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(invoices); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)

	// The DB the app writes through: a copy of db with the hook.
	appDB := db.WithQueryHook(client.QueryHook())
	err = appDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&Invoice{Customer: "Ada"}).Exec(ctx)
		return err // the commit wakes a worker
	})
	if err != nil {
		log.Fatal(err)
	}
	select {
	case customer := <-sent:
		fmt.Println("invoice sent to", customer)
	case <-time.After(time.Minute):
		fmt.Println("no worker woke up")
	}
	// Output:
	// invoice sent to Ada
}
