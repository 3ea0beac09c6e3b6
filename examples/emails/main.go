// Command emails turns an ordinary table of emails into a work queue.
//
// A row is in the queue while it matches the queue's query: status
// 'waiting' and no retry scheduled in the future. Four workers send the
// emails through a fake sender that fails about 30% of the time; a
// failure is recorded on the row (attempts, retry_at) so that it leaves
// the query until its retry is due, and an email that fails three times
// is marked 'failed' for good.
//
// Run it from the repository root, with MySQL 8 or MariaDB 10.6+ at
// BUNQUEUE_MYSQL_DSN (default below):
//
//	go run ./examples/emails
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
)

const (
	defaultDSN  = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
	numEmails   = 50
	maxAttempts = 3                      // failures before an email is given up
	firstRetry  = 200 * time.Millisecond // doubles after each failure
)

// Email is the app's own model: bunqueue needs no extra columns, only a
// primary key and a query that says which rows are waiting.
type Email struct {
	bun.BaseModel `bun:"table:example_email"`

	ID        int64 `bun:",pk,autoincrement"`
	Recipient string
	Status    string // waiting | sent | failed
	Attempts  int    // failed attempts so far
	RetryAt   *time.Time
	SentAt    *time.Time
}

// The queue query filters on status, orders by id and checks retry_at.
// The index that serves it is (status, id, retry_at): equality on status,
// then rows already in id order, so the server reads the first few waiting
// rows, checks retry_at inside the index and stops at the LIMIT. The
// tempting (status, retry_at, id) does not: retry_at is a range there, so
// the rows no longer come out in id order and the server must read, and
// under FOR UPDATE lock, every due row to sort them (EXPLAIN says "Using
// filesort") before it can return the first.
const schema = `CREATE TABLE IF NOT EXISTS example_email (
	id        BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	recipient VARCHAR(255) NOT NULL,
	status    VARCHAR(16) NOT NULL DEFAULT 'waiting',
	attempts  INT NOT NULL DEFAULT 0,
	retry_at  DATETIME(6) NULL,
	sent_at   DATETIME(6) NULL,
	INDEX example_email_queue (status, id, retry_at)
) ENGINE=InnoDB`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	dsn := os.Getenv("BUNQUEUE_MYSQL_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	sqldb, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	// Each worker holds a connection while it processes an email; leave
	// room for the client's own checks and for main.
	sqldb.SetMaxOpenConns(16)
	db := bun.NewDB(sqldb, mysqldialect.New())
	defer db.Close()

	// A fresh table with numEmails waiting emails.
	if _, err := db.ExecContext(ctx, schema); err != nil {
		log.Fatalf("create table (is the database at %s up?): %v", dsn, err)
	}
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE example_email"); err != nil {
		log.Fatal(err)
	}
	emails := make([]Email, numEmails)
	for i := range emails {
		emails[i] = Email{Recipient: fmt.Sprintf("user%02d@example.com", i+1), Status: "waiting"}
	}
	if _, err := db.NewInsert().Model(&emails).Exec(ctx); err != nil {
		log.Fatal(err)
	}

	// The queue: the query says which rows are waiting and in what order;
	// the handler runs inside the transaction that locks the row and must
	// move the row out of the query, through that transaction.
	queue := bunqueue.NewQueue[Email]("emails",
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting'").
				Where("retry_at IS NULL OR retry_at <= UTC_TIMESTAMP(6)"). // the database clock, not ours
				Order("id")
		},
		func(ctx context.Context, tx bun.Tx, e *Email) error {
			if err := send(ctx, e); err != nil {
				return err // its writes are undone, then OnError records the failure
			}
			_, err := tx.NewUpdate().Model(e).
				Set("status = 'sent'").
				Set("sent_at = UTC_TIMESTAMP(6)").
				WherePK().
				Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[Email]{Workers: 4, OnError: recordFailure},
	)

	// The client logs a failure that OnError recorded at Warn, and real
	// trouble (a failure nothing recorded, a lost database) at Error. Here
	// recorded failures are expected and main prints its own notes, so the
	// logger shows Error and above.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	client, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: logger, PollInterval: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(queue); err != nil {
		log.Fatal(err)
	}

	began := time.Now()
	fmt.Printf("sending %d emails with 4 workers; the fake sender fails ~30%% of the time\n", numEmails)
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	waitErr := waitUntilDone(ctx, db, 60*time.Second)

	// Stop claiming, let in-flight emails finish, but not for ever.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	if waitErr != nil {
		log.Fatal(waitErr)
	}
	elapsed := time.Since(began)

	var sent, failed, attempts int
	err = db.NewSelect().Model((*Email)(nil)).
		ColumnExpr("COALESCE(SUM(status = 'sent'), 0)").
		ColumnExpr("COALESCE(SUM(status = 'failed'), 0)").
		ColumnExpr("COALESCE(SUM(attempts), 0)").
		Scan(context.Background(), &sent, &failed, &attempts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("done in %s: %d sent, %d failed for good; %d failed attempts recorded (%d send attempts in all)\n",
		elapsed.Round(time.Millisecond), sent, failed, attempts, sent+attempts)
}

// recordFailure is the queue's OnError. It runs in a transaction that
// holds the row's lock, after the handler's writes were undone, and
// records the failure so that the row leaves the query: until retry_at
// for a retry (computed from the database clock, like the query's
// UTC_TIMESTAMP(6)), or for good once maxAttempts is reached. Its writes commit.
func recordFailure(ctx context.Context, tx bun.Tx, e *Email, cause error) error {
	attempts := e.Attempts + 1
	q := tx.NewUpdate().Model(e).Set("attempts = ?", attempts).WherePK()
	giveUp := attempts >= maxAttempts
	if giveUp {
		q = q.Set("status = 'failed'")
	} else {
		wait := firstRetry << (attempts - 1) // 200ms, 400ms, ...
		q = q.Set("retry_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", wait.Microseconds())
	}
	if _, err := q.Exec(ctx); err != nil {
		return err
	}
	if giveUp {
		fmt.Printf("  gave up on email %d to %s after %d attempts: %v\n", e.ID, e.Recipient, attempts, cause)
	}
	return nil
}

// send pretends to talk to a mail server: it takes a few milliseconds and
// fails about 30% of the time.
func send(ctx context.Context, e *Email) error {
	select {
	case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	if rand.Float64() < 0.3 {
		return errors.New("smtp: 451 temporary failure, try again later")
	}
	return nil
}

// waitUntilDone polls until no email is waiting, not even for a retry.
// (Queue.Count would not do: it skips rows that are locked or whose
// retry_at is still ahead.)
func waitUntilDone(ctx context.Context, db *bun.DB, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := db.NewSelect().Model((*Email)(nil)).Where("status = 'waiting'").Count(ctx)
		switch {
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting with %d emails still waiting: %w", n, ctx.Err())
		}
	}
}
