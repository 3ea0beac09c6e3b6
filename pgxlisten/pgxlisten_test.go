package pgxlisten_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bunqueue/bunqueue/pgxlisten"
)

// The tests need PostgreSQL at BUNQUEUE_PG_DSN, as the bunqueue tests do.
const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func dsn() string {
	if d := os.Getenv("BUNQUEUE_PG_DSN"); d != "" {
		return d
	}
	return defaultDSN
}

func name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// session is a plain connection of the test's, closed when it ends.
func session(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn())
	if err != nil {
		t.Fatalf("the tests need PostgreSQL at BUNQUEUE_PG_DSN (default %s): %v", defaultDSN, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// run is one call of Listen in a goroutine: what it reported, and how it
// ended.
type run struct {
	listening chan struct{}
	payloads  chan string
	done      chan struct{} // closed when Listen has returned err
	err       error
	cancel    context.CancelFunc
}

// listen calls l.Listen on channel until the test ends or cancel.
func listen(t *testing.T, l *pgxlisten.Listener, channel string) *run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{listening: make(chan struct{}), payloads: make(chan string, 100), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		r.err = l.Listen(ctx, channel, func() { close(r.listening) }, func(p string) { r.payloads <- p })
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	select {
	case <-r.listening:
	case <-r.done:
		t.Fatalf("Listen returned before it listened: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not listen within 10s")
	}
	return r
}

// next returns the next payload, failing the test after 10s.
func (r *run) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-r.payloads:
		return p
	case <-r.done:
		t.Fatalf("Listen returned: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
	}
	return ""
}

func TestListenDeliversCommittedNotifications(t *testing.T) {
	t.Parallel()
	l, err := pgxlisten.New(dsn())
	if err != nil {
		t.Fatal(err)
	}
	channel := name("Chan.With-Dots") // quoted as it is: case and dots kept
	r := listen(t, l, channel)
	conn := session(t)
	ctx := t.Context()

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'rolled back')", channel); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"SELECT pg_notify($1 || '_other', 'another channel')",
		"SELECT pg_notify($1, 'one')",
		"SELECT pg_notify($1, 'two')",
	} {
		if _, err := conn.Exec(ctx, stmt, channel); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered in commit order: the rolled-back one and the other
	// channel's would come first.
	for _, want := range []string{"one", "two"} {
		if got := r.next(t); got != want {
			t.Fatalf("payload %q, want %q", got, want)
		}
	}
	r.cancel()
	<-r.done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Listen returned %v after its context ended, want context.Canceled", r.err)
	}
}

func TestListenReturnsWhenTheConnectionEnds(t *testing.T) {
	t.Parallel()
	app := name("pgxlisten_test")
	cfg, err := pgx.ParseConfig(dsn())
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	r := listen(t, pgxlisten.NewConfig(cfg), name("chan"))
	conn := session(t)
	var ended bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&ended); err != nil || !ended {
		t.Fatalf("terminate the listening session: %v, %v", ended, err)
	}
	select {
	case <-r.done:
		if r.err == nil || errors.Is(r.err, context.Canceled) {
			t.Fatalf("Listen returned %v for a lost connection", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return within 10s of its session's end")
	}
}

func TestListenPingsAQuietConnection(t *testing.T) {
	t.Parallel()
	l, err := pgxlisten.New(dsn())
	if err != nil {
		t.Fatal(err)
	}
	l.PingInterval = 20 * time.Millisecond
	channel := name("chan")
	r := listen(t, l, channel)
	time.Sleep(200 * time.Millisecond) // several pings
	if _, err := session(t).Exec(t.Context(), "SELECT pg_notify($1, 'after the pings')", channel); err != nil {
		t.Fatal(err)
	}
	if got := r.next(t); got != "after the pings" {
		t.Fatalf("payload %q", got)
	}
}

func TestListenDefaultApplicationName(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(dsn())
	if err != nil {
		t.Fatal(err)
	}
	delete(cfg.RuntimeParams, "application_name")
	channel := name("chan")
	listen(t, pgxlisten.NewConfig(cfg), channel)
	var app string
	err = session(t).QueryRow(t.Context(), "SELECT application_name FROM pg_stat_activity WHERE query = $1", `LISTEN "`+channel+`"`).Scan(&app)
	if err != nil || app != pgxlisten.ApplicationName {
		t.Fatalf("application_name %q, %v; want %q", app, err, pgxlisten.ApplicationName)
	}
}

func TestNewRefusesABadConnString(t *testing.T) {
	t.Parallel()
	if _, err := pgxlisten.New("postgres://[::1"); err == nil {
		t.Fatal("New took a malformed URL")
	}
}
