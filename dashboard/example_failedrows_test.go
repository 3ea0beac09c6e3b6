package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// Options.FailedRows: the app reads the rows of its table queue that
// failed for good from its own table (here, those with an error), and
// the queue's page, queue?name=…, lists them by their primary key.
func ExampleOptions_failedRows() {
	type Email struct {
		bun.BaseModel `bun:"table:bq_example_emails"`
		ID            int64 `bun:",pk"`
		Sent          bool
		LastError     *string
		FailedAt      *time.Time
	}
	db := openExampleDB("bq_example_emails", "id BIGINT PRIMARY KEY, sent BOOL NOT NULL DEFAULT FALSE, "+
		"last_error VARCHAR(255) NULL, failed_at DATETIME(6) NULL, INDEX (sent, id), INDEX (failed_at)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_emails")
	if _, err := db.Exec("INSERT INTO bq_example_emails (id, sent, last_error, failed_at) VALUES " +
		"(1, FALSE, NULL, NULL), (7, TRUE, 'mailbox full', NOW(6)), (9, TRUE, 'no such user', NOW(6) - INTERVAL 1 MINUTE)"); err != nil {
		log.Fatal(err)
	}
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	emails := bunqueue.NewQueue("bq_example_emails",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("sent = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, e *Email) error { return nil }, nil)
	if err := client.Add(emails); err != nil {
		log.Fatal(err)
	}

	failedEmails := func(ctx context.Context) ([]dashboard.FailedRow, error) {
		var dead []Email
		err := db.NewSelect().Model(&dead).Where("failed_at IS NOT NULL").
			Order("failed_at DESC").Limit(dashboard.FailedRowsShown + 1).Scan(ctx)
		rows := make([]dashboard.FailedRow, len(dead))
		for i, e := range dead {
			rows[i] = dashboard.FailedRow{Key: fmt.Sprintf("id=%d", e.ID), Error: *e.LastError, FailedAt: *e.FailedAt}
		}
		return rows, err
	}
	server := httptest.NewServer(dashboard.New(client, &dashboard.Options{
		FailedRows: map[string]func(context.Context) ([]dashboard.FailedRow, error){"bq_example_emails": failedEmails},
	}))
	defer server.Close()

	res, err := http.Get(server.URL + "/queue?name=bq_example_emails")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	fmt.Println(res.Status)
	section := regexp.MustCompile(`(?s)<section id="failed-rows">.*?</section>`).Find(page)
	for _, m := range regexp.MustCompile(`(?s)<tr data-key="([^"]*)">.*?<td class="error-text">([^<]*)</td>`).FindAllSubmatch(section, -1) {
		fmt.Printf("%s: %s\n", m[1], m[2])
	}
	// Output:
	// 200 OK
	// id=7: mailbox full
	// id=9: no such user
}
