// Command signup is a small web app that enqueues a job in the same
// transaction as the business write that causes it.
//
// POST /signup inserts a user and enqueues a WelcomeEmail job for it with
// client.Enqueue through the same bun.Tx, so the job exists if and only if
// the user does: a duplicate email creates neither, and a request with
// fail=1 (which fails on purpose after both writes) rolls both back. The
// same process runs the worker, which "sends" the email (it logs it) and
// records it in example_signup_sent through the job's transaction, so the
// record commits together with the job's completion. GET /users lists the
// users and whether their welcome email was sent.
//
// Run it from the repository root. It runs on MySQL 8 or MariaDB 10.6+
// when BUNQUEUE_MYSQL_DSN is set (e.g.
// root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC), on PostgreSQL 12+
// when BUNQUEUE_PG_DSN is (e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), and otherwise
// on an SQLite file in the temporary directory (bunqueue-example-signup.db,
// kept between runs), so nothing but Go is needed (see
// examples/internal/exampledb):
//
//	go run ./examples/signup -demo    # signs up three users itself, prints the story, exits
//	go run ./examples/signup          # serves at 127.0.0.1:8080 until Ctrl-C
//
// and in another terminal:
//
//	curl -d email=ada@example.com -d 'name=Ada Lovelace' localhost:8080/signup
//	curl -H 'Content-Type: application/json' -d '{"email":"grace@example.com","name":"Grace Hopper"}' localhost:8080/signup
//	curl -d email=eve@example.com -d name=Eve 'localhost:8080/signup?fail=1'
//	curl localhost:8080/users
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. http://127.0.0.1:4318, where
// Jaeger receives OTLP over HTTP), it exports traces by OTLP/HTTP as
// service "signup" (or OTEL_SERVICE_NAME): a SERVER span per HTTP request,
// the "send default" span of each Enqueue inside it, a "process default"
// span per job (a trace of its own, linked to the send span), and a span per
// SQL statement under whichever of those ran it. Without it, nothing is
// exported. scripts/jaeger-e2e.sh checks all that in a real Jaeger.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/examples/internal/exampledb"
)

// pollInterval is how often an idle worker looks for new jobs. The
// default (bunqueue.PollIntervalDefault) is a second; a shorter one sends
// the welcome email sooner after the signup, for a few more cheap queries.
const pollInterval = 200 * time.Millisecond

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := flag.Bool("demo", false, "sign up three users on a random port, print what happened, and exit")
	flag.Parse()

	// ctx is cancelled on Ctrl-C (SIGINT) or SIGTERM: that starts the
	// graceful shutdown.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *demo {
		*addr = "127.0.0.1:0" // any free port
		// The worker's log lines and the demo's story on one stream, in order.
		log.SetOutput(os.Stdout)
	}
	if err := run(ctx, *addr, *demo); err != nil {
		log.Fatal(err)
	}
}

// run opens the database (see exampledb.Open), sets the app up on it,
// serves until ctx ends (or, with demo, until the demo is over) and
// shuts down.
func run(ctx context.Context, addr string, demo bool) (err error) {
	// 0. Tracing, if OTEL_EXPORTER_OTLP_ENDPOINT asks for it (tel is nil,
	// and changes nothing, otherwise). Deferred first, so it runs last:
	// after client.Stop has ended the workers' spans, it sends what is left.
	tel, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	if tel != nil {
		log.Printf("tracing: exporting spans by OTLP/HTTP to %s", otlpEndpoint())
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, tel.shutdown(flushCtx))
	}()

	// Each worker holds a connection while it runs a job; the HTTP
	// handlers need theirs too. bunqueue's Start refuses a pool too small
	// for its workers.
	db, where, err := exampledb.Open("signup", 20)
	if err != nil {
		return err
	}
	defer db.Close()
	log.Printf("database: %s", where)
	return runOn(ctx, db, where, tel, addr, demo)
}

// runOn is run on an open db, which where describes (for errors). The
// tests call it on databases of their own.
func runOn(ctx context.Context, db *bun.DB, where string, tel *tracing, addr string, demo bool) (err error) {
	if tel != nil {
		name, err := databaseName(ctx, db)
		if err != nil {
			return fmt.Errorf("%w (database: %s)", err, where)
		}
		tel.instrumentDB(db, name) // SQL statements become spans
	}

	// 1. The tables: bunqueue's jobs tables (idempotent; safe when several
	// processes start at once), then the app's own.
	if err := bunqueue.Migrate(ctx, db); err != nil {
		return fmt.Errorf("%w (database: %s)", err, where)
	}
	if err := createTables(ctx, db); err != nil {
		return err
	}

	// 2. The bunqueue client and its worker. A nil Config.JobQueues means
	// one jobs queue, bunqueue.QueueDefault, with one worker goroutine.
	cfg := &bunqueue.Config{PollInterval: pollInterval}
	tel.configure(cfg) // send and process spans, W3C context stored with each job
	client, err := bunqueue.NewClient(db, cfg)
	if err != nil {
		return err
	}
	if err := bunqueue.AddWorker(client, welcomeWorker(slog.Default())); err != nil {
		return err
	}
	// Start checks the server and the tables, then starts the workers.
	// They run until client.Stop, whatever becomes of ctx.
	if err := client.Start(ctx); err != nil {
		return err
	}

	// 3. The HTTP server, on the same db and client.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = client.Stop(context.Background())
		return err
	}
	srv := &http.Server{
		Handler:           tel.handler(newServer(db, client, bunqueue.QueueDefault)),
		ReadHeaderTimeout: 5 * time.Second,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	baseURL := "http://" + ln.Addr().String()

	if demo {
		err = runDemo(ctx, db, baseURL)
	} else {
		log.Printf("listening on %s (Ctrl-C to stop)", baseURL)
		select {
		case <-ctx.Done():
			log.Print("shutting down")
		case err = <-serveErr: // the server failed on its own
		}
	}

	// 4. Graceful shutdown, HTTP first: Shutdown stops accepting requests
	// and waits for those in flight, whose transactions (users and their
	// jobs) commit or roll back as usual. Then Stop: the workers claim no
	// more jobs and finish the ones they hold; past the timeout, those
	// roll back and wait in the table for the next start.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		err = errors.Join(err, fmt.Errorf("http shutdown: %w", serr))
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	if serr := client.Stop(stopCtx); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// databaseName names the database db is on, for the spans' db.name:
// the current database on MySQL and PostgreSQL, the main file on SQLite.
func databaseName(ctx context.Context, db *bun.DB) (string, error) {
	var q string
	switch db.Dialect().Name() {
	case dialect.MySQL:
		q = "SELECT COALESCE(DATABASE(), '')"
	case dialect.PG:
		q = "SELECT current_database()"
	case dialect.SQLite:
		q = "SELECT file FROM pragma_database_list WHERE name = 'main'"
	default:
		return "", nil
	}
	var name string
	err := db.QueryRowContext(ctx, q).Scan(&name)
	return name, err
}
