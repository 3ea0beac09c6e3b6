package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// Options.RetryRow: the app's function puts a row that failed for good
// back in its queue, by the key its FailedRows function gave it; the
// queue's page then has a Retry button a row, and a script retries one
// with POST retry-row and the dashboard's APIToken.
func ExampleOptions_retryRow() {
	type Email struct {
		bun.BaseModel `bun:"table:bq_example_retry_emails"`
		ID            int64 `bun:",pk"`
		Sent          bool
		LastError     *string
		FailedAt      *time.Time
	}
	db := openExampleDB("bq_example_retry_emails", "id BIGINT PRIMARY KEY, sent BOOL NOT NULL DEFAULT FALSE, "+
		"last_error VARCHAR(255) NULL, failed_at DATETIME(6) NULL, INDEX (sent, id), INDEX (failed_at)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_retry_emails")
	if _, err := db.Exec("INSERT INTO bq_example_retry_emails (id, sent, last_error, failed_at) VALUES (7, TRUE, 'mailbox full', NOW(6))"); err != nil {
		log.Fatal(err)
	}
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(bunqueue.NewQueue("emails",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("sent = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, e *Email) error { return nil }, nil)); err != nil {
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
	retryEmail := func(ctx context.Context, key string) error {
		id, err := strconv.ParseInt(strings.TrimPrefix(key, "id="), 10, 64)
		if err != nil {
			return err
		}
		_, err = db.NewUpdate().Model((*Email)(nil)).
			Set("sent = FALSE, last_error = NULL, failed_at = NULL").Where("id = ?", id).Exec(ctx)
		return err
	}
	const token = "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a" // the app's secret
	server := httptest.NewServer(dashboard.New(client, &dashboard.Options{
		AllowActions: true,
		APIToken:     token,
		FailedRows:   map[string]func(context.Context) ([]dashboard.FailedRow, error){"emails": failedEmails},
		RetryRow:     map[string]func(context.Context, string) error{"emails": retryEmail},
	}))
	defer server.Close()

	// A script: no browser session, the token instead of a CSRF token.
	form := url.Values{"name": {"emails"}, "key": {"id=7"}}
	req, _ := http.NewRequest(http.MethodPost, server.URL+"/retry-row", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	var answer dashboard.RowActionResult
	if err := json.NewDecoder(res.Body).Decode(&answer); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, answer.Action, answer.Rows[0].Key, answer.Rows[0].OK)

	var again Email
	if err := db.NewSelect().Model(&again).Where("id = 7").Scan(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("back in the queue:", !again.Sent && again.FailedAt == nil)
	// Output:
	// 200 OK retry_row id=7 true
	// back in the queue: true
}
