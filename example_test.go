package bunqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
)

// exampleDSN is the test database: BUNQUEUE_MYSQL_DSN, or
// root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC.
var exampleDSN = func() string {
	if dsn := os.Getenv("BUNQUEUE_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
}()

// openExampleDB opens the examples' database and (re)creates a table for
// one example; drop it when done.
func openExampleDB(table, columns string) *bun.DB {
	sqldb, err := sql.Open("mysql", exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, mysqldialect.New())
	for _, stmt := range []string{
		"DROP TABLE IF EXISTS " + table,
		"CREATE TABLE " + table + " (" + columns + ") ENGINE=InnoDB",
	} {
		if _, err := db.Exec(stmt); err != nil {
			log.Fatal(err)
		}
	}
	return db
}

// An email queue over the app's own table: a row whose status is
// 'waiting' is in the queue; sending it sets the status to 'sent', which
// takes the row out.
func Example() {
	type Email struct {
		bun.BaseModel `bun:"table:bq_example_email"`
		ID            int64 `bun:",pk,autoincrement"`
		Recipient     string
		Status        string // waiting | sent | failed
		Attempts      int
		RetryAt       *time.Time
	}
	ctx := context.Background()

	// The DSN needs parseTime=true&loc=UTC, such as
	// "app:secret@tcp(127.0.0.1:3306)/app?parseTime=true&loc=UTC".
	sqldb, err := sql.Open("mysql", exampleDSN)
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, mysqldialect.New())
	defer db.Close()

	// The app's table, with an index that serves the queue's query.
	if _, err := db.Exec("DROP TABLE IF EXISTS bq_example_email"); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE bq_example_email (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		recipient VARCHAR(255) NOT NULL,
		status VARCHAR(16) NOT NULL DEFAULT 'waiting',
		attempts INT NOT NULL DEFAULT 0,
		retry_at DATETIME(6) NULL,
		INDEX (status, id)
	) ENGINE=InnoDB`); err != nil {
		log.Fatal(err)
	}
	defer db.Exec("DROP TABLE bq_example_email")
	if _, err := db.NewInsert().Model(&[]Email{
		{Recipient: "ada@example.com", Status: "waiting"},
		{Recipient: "grace@example.com", Status: "waiting"},
		{Recipient: "linus@example.com", Status: "waiting"},
	}).Exec(ctx); err != nil {
		log.Fatal(err)
	}

	emails := bunqueue.NewQueue("emails",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").
				Where("retry_at IS NULL OR retry_at <= ?", bunqueue.Now(db)). // the database clock
				Order("id")
		},
		func(ctx context.Context, tx bun.Tx, e *Email) error {
			fmt.Println("sending to", e.Recipient) // an external effect: at least once
			_, err := tx.NewUpdate().Model(e).Set("status = 'sent'").WherePK().Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[Email]{Workers: 4},
	)

	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(emails); err != nil {
		log.Fatal(err)
	}

	// A service calls client.Start(ctx) and, on shutdown, client.Stop(ctx).
	// Here the queue is drained in this goroutine, one row at a time.
	for {
		ok, err := emails.ProcessNext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if !ok {
			break
		}
	}

	var sent int
	if err := db.NewRaw("SELECT COUNT(*) FROM bq_example_email WHERE status = 'sent'").Scan(ctx, &sent); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent:", sent)
	// Output:
	// sending to ada@example.com
	// sending to grace@example.com
	// sending to linus@example.com
	// sent: 3
}

// Count tells how many rows wait, skipping the rows workers hold, and
// stops counting at the limit.
func ExampleQueue_Count() {
	type Task struct {
		bun.BaseModel `bun:"table:bq_example_count"`
		ID            int64 `bun:",pk"`
		Done          bool
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_count", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_count")
	if _, err := db.Exec("INSERT INTO bq_example_count (id, done) VALUES (1, FALSE), (2, FALSE), (3, FALSE), (4, TRUE)"); err != nil {
		log.Fatal(err)
	}

	tasks := bunqueue.NewQueue("tasks",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, t *Task) error {
			_, err := tx.NewUpdate().Model(t).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, nil)
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(tasks); err != nil {
		log.Fatal(err)
	}

	n, err := tasks.Count(ctx, 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting:", n)

	n, err = tasks.Count(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting, counting up to 2:", n)

	// Another transaction, like a worker's, holds row 1.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT id FROM bq_example_count WHERE id = 1 FOR UPDATE"); err != nil {
		log.Fatal(err)
	}
	n, err = tasks.Count(ctx, 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting and not locked:", n)
	// Output:
	// waiting: 3
	// waiting, counting up to 2: 2
	// waiting and not locked: 2
}

// ProcessNext handles one row in the calling goroutine: it reports
// whether there was one, and the row's failure if it failed.
func ExampleQueue_ProcessNext() {
	type Thumbnail struct {
		bun.BaseModel `bun:"table:bq_example_next"`
		ID            int64 `bun:",pk"`
		Image         string
		Done          bool
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_next", "id BIGINT PRIMARY KEY, image VARCHAR(255) NOT NULL, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_next")
	if _, err := db.Exec("INSERT INTO bq_example_next (id, image) VALUES (1, 'cat.png'), (2, 'broken.png')"); err != nil {
		log.Fatal(err)
	}

	thumbnails := bunqueue.NewQueue("thumbnails",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, t *Thumbnail) error {
			if t.Image == "broken.png" {
				return errors.New("not an image")
			}
			_, err := tx.NewUpdate().Model(t).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, nil)
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(thumbnails); err != nil {
		log.Fatal(err)
	}

	ok, err := thumbnails.ProcessNext(ctx)
	fmt.Println("row 1:", ok, err)

	// The handler fails: its writes are undone and the row stays in the
	// queue, but this process leaves it alone for a while (Cooldown).
	ok, err = thumbnails.ProcessNext(ctx)
	var ie *bunqueue.ItemError
	if errors.As(err, &ie) {
		fmt.Println("row 2:", ok, ie.Key, ie.Err, "cooling down:", ie.Cooldown > 0)
	}

	// Row 2 still matches the query, but it is cooling down.
	ok, err = thumbnails.ProcessNext(ctx)
	fmt.Println("next:", ok, err)
	// Output:
	// row 1: true <nil>
	// row 2: true id=2 not an image cooling down: true
	// next: false <nil>
}

// OnError records a failure on the row, in the item's transaction: here
// an attempts count and a retry_at that takes the row out of the queue
// for a while, or a failed status after the third attempt.
func ExampleQueueConfig_onError() {
	type Webhook struct {
		bun.BaseModel `bun:"table:bq_example_onerror"`
		ID            int64 `bun:",pk"`
		URL           string
		Status        string // waiting | delivered | failed
		Attempts      int
		LastError     string
		RetryAt       *time.Time
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_onerror", `id BIGINT PRIMARY KEY,
		url VARCHAR(255) NOT NULL,
		status VARCHAR(16) NOT NULL DEFAULT 'waiting',
		attempts INT NOT NULL DEFAULT 0,
		last_error TEXT NOT NULL,
		retry_at DATETIME(6) NULL,
		INDEX (status, id)`)
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_onerror")
	if _, err := db.Exec("INSERT INTO bq_example_onerror (id, url, last_error) VALUES (1, 'https://example.com/hook', '')"); err != nil {
		log.Fatal(err)
	}

	webhooks := bunqueue.NewQueue("webhooks",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").
				Where("retry_at IS NULL OR retry_at <= ?", bunqueue.Now(db)).
				Order("id")
		},
		func(ctx context.Context, tx bun.Tx, w *Webhook) error {
			return errors.New("503 Service Unavailable")
		},
		&bunqueue.QueueConfig[Webhook]{
			OnError: func(ctx context.Context, tx bun.Tx, w *Webhook, err error) error {
				// w is the row as claimed: the next attempt is computed
				// here, not in SQL, where PostgreSQL and SQLite would not
				// see one SET clause's change in the next.
				attempts := w.Attempts + 1
				q := tx.NewUpdate().Model(w).WherePK().
					Set("attempts = ?", attempts).
					Set("last_error = ?", err.Error())
				if attempts >= 3 {
					q = q.Set("status = 'failed'")
				} else {
					// Times are compared in SQL, on the database's clock.
					wait := time.Duration(10<<w.Attempts) * time.Second // 10 s, 20 s
					q = q.Set("retry_at = ?", bunqueue.NowPlus(tx, wait))
				}
				_, err = q.Exec(ctx)
				return err
			},
		})
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(webhooks); err != nil {
		log.Fatal(err)
	}

	ok, err := webhooks.ProcessNext(ctx)
	var ie *bunqueue.ItemError
	if errors.As(err, &ie) {
		fmt.Println(ok, ie.Key, ie.Err, "recorded:", ie.Recorded)
	}

	var attempts int
	var lastError string
	var later bool
	if err := db.NewRaw("SELECT attempts, last_error, retry_at > ? FROM bq_example_onerror WHERE id = 1", bunqueue.Now(db)).
		Scan(ctx, &attempts, &lastError, &later); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("attempts: %d, last error: %q, retry later: %t\n", attempts, lastError, later)

	// Until retry_at, the row is out of the queue.
	ok, err = webhooks.ProcessNext(ctx)
	fmt.Println("next:", ok, err)
	// Output:
	// true id=1 503 Service Unavailable recorded: true
	// attempts: 1, last error: "503 Service Unavailable", retry later: true
	// next: false <nil>
}

// A batch handler gets each locked batch whole and changes it in one
// statement: here page views are rolled up into per-page totals, many rows
// per transaction.
func ExampleNewBatchQueue() {
	type View struct {
		bun.BaseModel `bun:"table:bq_example_view"`
		ID            int64 `bun:",pk,autoincrement"`
		Page          string
		Counted       bool
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_view", "id BIGINT AUTO_INCREMENT PRIMARY KEY, page VARCHAR(64) NOT NULL, counted BOOL NOT NULL DEFAULT FALSE, INDEX (counted, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_view")
	for _, stmt := range []string{"DROP TABLE IF EXISTS bq_example_page", "CREATE TABLE bq_example_page (page VARCHAR(64) PRIMARY KEY, views INT NOT NULL)"} {
		if _, err := db.Exec(stmt); err != nil {
			log.Fatal(err)
		}
	}
	defer db.Exec("DROP TABLE bq_example_page")
	views := make([]View, 1000)
	for i := range views {
		views[i].Page = []string{"/", "/pricing", "/docs"}[i%3]
	}
	if _, err := db.NewInsert().Model(&views).Exec(ctx); err != nil {
		log.Fatal(err)
	}

	rollup := bunqueue.NewBatchQueue("rollup",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("counted = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, batch []View) error {
			ids := make([]int64, len(batch))
			perPage := map[string]int{}
			for i, v := range batch {
				ids[i] = v.ID
				perPage[v.Page]++
			}
			for page, n := range perPage {
				if _, err := tx.ExecContext(ctx, "INSERT INTO bq_example_page (page, views) VALUES (?, ?) ON DUPLICATE KEY UPDATE views = views + VALUES(views)", page, n); err != nil {
					return err
				}
			}
			_, err := tx.NewUpdate().Model((*View)(nil)).Set("counted = TRUE").Where("id IN (?)", bun.List(ids)).Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[View]{Workers: 2, BatchSize: 100})
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(rollup); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for {
		n, err := rollup.Count(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	var totals []struct {
		Page  string
		Views int
	}
	if err := db.NewRaw("SELECT page, views FROM bq_example_page ORDER BY page").Scan(ctx, &totals); err != nil {
		log.Fatal(err)
	}
	for _, t := range totals {
		fmt.Println(t.Page, t.Views)
	}
	// Output:
	// / 334
	// /docs 333
	// /pricing 333
}

// A handler can run its own write as a statement prepared on the server,
// once per connection, instead of a text that bun formats anew for every
// row: prepare it on the pool and run it in the item's transaction
// through tx.Tx.StmtContext. It still commits with the item. bun's query
// hooks (Client.QueryHook among them) do not see it.
func ExampleHandlerFunc_prepared() {
	type Order struct {
		bun.BaseModel `bun:"table:bq_example_prepared"`
		ID            int64 `bun:",pk"`
		Status        string
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_prepared", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'new', INDEX (status, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_prepared")
	if _, err := db.Exec("INSERT INTO bq_example_prepared (id) VALUES (1), (2)"); err != nil {
		log.Fatal(err)
	}

	// ? on MySQL and MariaDB; $1 on PostgreSQL.
	ship, err := db.DB.PrepareContext(ctx, "UPDATE bq_example_prepared SET status = 'shipped' WHERE id = ?")
	if err != nil {
		log.Fatal(err)
	}
	defer ship.Close()

	orders := bunqueue.NewQueue("orders",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'new'").Order("id") },
		func(ctx context.Context, tx bun.Tx, o *Order) error {
			_, err := tx.Tx.StmtContext(ctx, ship).ExecContext(ctx, o.ID)
			return err
		}, nil)
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(orders); err != nil {
		log.Fatal(err)
	}
	for {
		ok, err := orders.ProcessNext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if !ok {
			break
		}
	}
	var shipped int
	if err := db.QueryRow("SELECT COUNT(*) FROM bq_example_prepared WHERE status = 'shipped'").Scan(&shipped); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shipped:", shipped)
	// Output:
	// shipped: 2
}
