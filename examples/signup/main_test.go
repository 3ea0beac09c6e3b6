package main

// These tests run the app on each server (see testServers): MySQL or
// MariaDB at BUNQUEUE_MYSQL_DSN and PostgreSQL at BUNQUEUE_PG_DSN (the
// defaults of tests/dbtest, as the rest of the repository's tests), and
// SQLite, on a fresh file of each test's own. On the servers, each test
// signs up users with emails of its own and puts its jobs in a jobs queue
// of its own, so tests (and test runs) that share the tables do not see
// or take each other's work; each deletes its rows when it ends.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/bunqueuetest"
	"github.com/bunqueue/bunqueue/examples/internal/exampledb"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// testServer is a database the tests run the app on.
type testServer struct {
	name string // "mysql", "postgres" or "sqlite"
	kind string // exampledb's kind
	// dsn returns the DSN of the database (for SQLite, a fresh file in
	// the test's t.TempDir()).
	dsn func(t *testing.T) string
}

// testServers are the servers the tests run on: the repository's test
// servers (CI has both) and SQLite.
func testServers() []testServer {
	return []testServer{
		{"mysql", exampledb.MySQL, func(*testing.T) string { return dbtest.DSN() }},
		{"postgres", exampledb.Postgres, func(*testing.T) string { return dbtest.PGDSN() }},
		{"sqlite", exampledb.SQLite, func(t *testing.T) string { return filepath.Join(t.TempDir(), "signup.db") }},
	}
}

// forEachServer runs f in a parallel subtest per server.
func forEachServer(t *testing.T, f func(t *testing.T, srv testServer)) {
	for _, srv := range testServers() {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			f(t, srv)
		})
	}
}

// openTestDB opens the database at dsn as main does, with main's pool
// size, closed when the test ends.
func openTestDB(t *testing.T, kind, dsn string) *bun.DB {
	t.Helper()
	db, where, err := exampledb.OpenDSN(kind, dsn, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("the tests need MySQL 8 or MariaDB 10.6+ at BUNQUEUE_MYSQL_DSN (default %s) and PostgreSQL 12+ at BUNQUEUE_PG_DSN (default %s): %s: %v",
			dbtest.DefaultDSN, dbtest.DefaultPGDSN, where, err)
	}
	return db
}

// testApp is the app as main wires it, with its HTTP handler behind an
// httptest server. Its client is not started: a test calls start when it
// wants the worker to run.
type testApp struct {
	t      *testing.T
	db     *bun.DB
	client *bunqueue.Client
	queue  string       // this test's jobs queue
	domain string       // this test's email domain
	url    string       // the server's base URL
	runs   atomic.Int32 // worker runs
}

func newTestApp(t *testing.T, srv testServer) *testApp {
	t.Helper()
	return newTracedTestApp(t, srv, nil)
}

// newTracedTestApp is newTestApp with the app's tracing set up as main
// does it (nil: none, as newTestApp).
func newTracedTestApp(t *testing.T, srv testServer, tel *tracing) *testApp {
	t.Helper()
	db := openTestDB(t, srv.kind, srv.dsn(t))
	tel.instrumentDB(db, "")
	ctx := t.Context()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		t.Fatalf("migrate on %s: %v", srv.name, err)
	}
	if err := createTables(ctx, db); err != nil {
		t.Fatal(err)
	}

	suffix := randomSuffix()
	a := &testApp{t: t, db: db, queue: "signup_test_" + suffix, domain: suffix + ".signup-test.example"}
	t.Cleanup(func() { deleteTestRows(t, db, a.queue, a.domain) })

	logger := testLogger(t)
	cfg := &bunqueue.Config{
		Logger:       logger,
		PollInterval: 20 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{a.queue: {}},
	}
	tel.configure(cfg)
	var err error
	a.client, err = bunqueue.NewClient(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	work := welcomeWorker(logger)
	err = bunqueue.AddWorker(a.client, bunqueue.WorkerFunc[WelcomeEmail](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[WelcomeEmail]) error {
			a.runs.Add(1)
			return work(ctx, db, job)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the rows are deleted
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.client.Stop(ctx); err != nil {
			t.Error(err)
		}
	})

	hs := httptest.NewServer(tel.handler(newServer(db, a.client, a.queue)))
	t.Cleanup(hs.Close)
	a.url = hs.URL
	return a
}

// start starts the client's workers.
func (a *testApp) start() {
	a.t.Helper()
	if err := a.client.Start(a.t.Context()); err != nil {
		a.t.Fatal(err)
	}
}

// email returns an address of this test's.
func (a *testApp) email(name string) string { return name + "@" + a.domain }

// response is what POST /signup answers, in every case.
type response struct {
	status           int
	ID               int64  `json:"id"`
	Email            string `json:"email"`
	WelcomeJobID     int64  `json:"welcome_job_id"`
	Error            string `json:"error"`
	RolledBackUserID int64  `json:"rolled_back_user_id"`
	RolledBackJobID  int64  `json:"rolled_back_job_id"`
}

// post posts body to path with the content type and headers (pairs).
func (a *testApp) post(path, contentType, body string, header ...string) response {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.t.Context(), http.MethodPost, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	r := response{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &r); err != nil {
		a.t.Fatalf("POST %s: %d %s: %v", path, resp.StatusCode, raw, err)
	}
	return r
}

func (a *testApp) postForm(path string, form url.Values, header ...string) response {
	a.t.Helper()
	return a.post(path, "application/x-www-form-urlencoded", form.Encode(), header...)
}

// count runs a query that returns one number.
func (a *testApp) count(query string, args ...any) int {
	a.t.Helper()
	var n int
	if err := a.db.NewRaw(query, args...).Scan(context.Background(), &n); err != nil {
		a.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// usersWithEmail counts the users with that email.
func (a *testApp) usersWithEmail(email string) int {
	return a.count("SELECT COUNT(*) FROM example_signup_user WHERE email = ?", email)
}

// emailsSent counts the welcome emails recorded for a user.
func (a *testApp) emailsSent(userID int64) int {
	return a.count("SELECT COUNT(*) FROM example_signup_sent WHERE user_id = ?", userID)
}

// waitFor polls cond until it holds, or fails the test after timeout.
func (a *testApp) waitFor(timeout time.Duration, what string, cond func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			a.t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSignupSendsOneWelcomeEmail(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, srv testServer) {
		for _, tc := range []struct {
			name string
			post func(a *testApp, email string) response
		}{
			{"form", func(a *testApp, email string) response {
				return a.postForm("/signup", url.Values{"email": {email}, "name": {"Ada Lovelace"}})
			}},
			{"json", func(a *testApp, email string) response {
				body, _ := json.Marshal(map[string]string{"email": email, "name": "Ada Lovelace"})
				return a.post("/signup", "application/json", string(body))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				a := newTestApp(t, srv)
				email := a.email("ada")

				r := tc.post(a, email)
				if r.status != http.StatusCreated || r.ID == 0 || r.WelcomeJobID == 0 || r.Email != email {
					t.Fatalf("POST /signup: got %+v, want 201 with the user and its job", r)
				}
				if n := a.count("SELECT COUNT(*) FROM example_signup_user WHERE id = ? AND email = ?", r.ID, email); n != 1 {
					t.Fatalf("user %d with email %s: %d rows, want 1", r.ID, email, n)
				}
				// The worker is not running yet: the job waits in the test's
				// queue, and no email is sent.
				job := bunqueuetest.RequireEnqueued(t.Context(), t, a.db, WelcomeEmail{UserID: r.ID},
					&bunqueuetest.RequireEnqueuedOpts{Queue: a.queue})
				if job.ID != r.WelcomeJobID {
					t.Fatalf("the welcome job of user %d is job %d; POST /signup said %d", r.ID, job.ID, r.WelcomeJobID)
				}
				if n := a.emailsSent(r.ID); n != 0 {
					t.Fatalf("emails sent before the worker ran: %d", n)
				}

				a.start()
				a.waitFor(10*time.Second, "the welcome email was not recorded", func() bool { return a.emailsSent(r.ID) > 0 })
				// The record and the job's completion committed together: the
				// job is gone the moment the record is there.
				bunqueuetest.RequireNotEnqueued(t.Context(), t, a.db, WelcomeEmail{UserID: r.ID}, nil)
				if n := a.count("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", a.queue); n != 0 {
					t.Errorf("failed jobs in the test's queue: %d, want 0", n)
				}
				if n := a.emailsSent(r.ID); n != 1 {
					t.Errorf("emails sent: %d, want 1", n)
				}
				if n := a.runs.Load(); n != 1 {
					t.Errorf("worker runs: %d, want 1", n)
				}

				// GET /users says so too.
				resp, err := http.Get(a.url + "/users")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var users []userStatus
				if err := json.NewDecoder(resp.Body).Decode(&users); err != nil {
					t.Fatal(err)
				}
				found := false
				for _, u := range users {
					if u.ID == r.ID {
						found = true
						if !u.WelcomeSent || u.WelcomeSentAt == nil || u.Email != email || u.Name != "Ada Lovelace" {
							t.Errorf("GET /users: got %+v, want %s with its welcome email sent", u, email)
						}
					}
				}
				if !found {
					t.Errorf("GET /users does not list user %d", r.ID)
				}
			})
		}
	})
}

// The welcome worker, run once through the client's own worker path
// (bunqueuetest.WorkJob), without starting the client: it records the
// email in the job's transaction, which completes the job; for a user
// that no longer exists it cancels the job, which moves to the failed
// jobs.
func TestWelcomeWorker(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, srv testServer) {
		a := newTestApp(t, srv)
		ctx := t.Context()
		r := a.postForm("/signup", url.Values{"email": {a.email("ada")}, "name": {"Ada Lovelace"}})
		if r.status != http.StatusCreated {
			t.Fatalf("POST /signup: got %+v, want 201", r)
		}
		job := bunqueuetest.RequireEnqueued(ctx, t, a.db, WelcomeEmail{UserID: r.ID}, &bunqueuetest.RequireEnqueuedOpts{Queue: a.queue})
		res := bunqueuetest.WorkJob(ctx, t, a.client, job.ID)
		if res.Outcome != bunqueuetest.Completed || res.Attempt != 1 {
			t.Fatalf("the welcome job: %+v, want completed at the first attempt", res)
		}
		if n := a.emailsSent(r.ID); n != 1 {
			t.Errorf("emails sent: %d, want 1", n)
		}
		bunqueuetest.RequireNotEnqueued(ctx, t, a.db, WelcomeEmail{UserID: r.ID}, nil)

		res = bunqueuetest.Work(ctx, t, a.client, WelcomeEmail{UserID: -1}, &bunqueue.EnqueueOpts{Queue: a.queue})
		if res.Outcome != bunqueuetest.Cancelled || res.Err == nil || !strings.Contains(res.Err.Error(), "user -1 no longer exists") {
			t.Fatalf("the welcome job of a user that does not exist: %+v, want cancelled", res)
		}
		if n := a.count("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", res.JobID); n != 1 {
			t.Errorf("failed jobs with id %d: %d, want 1", res.JobID, n)
		}
	})
}

func TestFailedSignupLeavesNoUserAndNoJob(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, srv testServer) {
		for _, tc := range []struct {
			name   string
			path   string
			form   url.Values
			header []string
		}{
			{name: "query", path: "/signup?fail=1"},
			{name: "form", path: "/signup", form: url.Values{"fail": {"1"}}},
			{name: "header", path: "/signup", header: []string{"X-Fail", "1"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				a := newTestApp(t, srv)
				email := a.email("eve")
				form := url.Values{"email": {email}, "name": {"Eve"}}
				for k, v := range tc.form {
					form[k] = v
				}

				r := a.postForm(tc.path, form, tc.header...)
				if r.status != http.StatusInternalServerError || r.RolledBackUserID == 0 || r.RolledBackJobID == 0 {
					t.Fatalf("POST %s: got %+v, want 500 naming the rolled-back user and job", tc.path, r)
				}
				// The insert and the Enqueue both happened (they returned
				// ids), and the rollback took both. The client is not
				// running, so a job that had been committed would still be
				// there.
				if n := a.usersWithEmail(email); n != 0 {
					t.Errorf("users with email %s: %d, want 0", email, n)
				}
				if n := a.count("SELECT COUNT(*) FROM example_signup_user WHERE id = ?", r.RolledBackUserID); n != 0 {
					t.Errorf("user %d: %d rows, want 0", r.RolledBackUserID, n)
				}
				if n := a.count("SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", r.RolledBackJobID); n != 0 {
					t.Errorf("job %d: %d rows, want 0", r.RolledBackJobID, n)
				}
				bunqueuetest.RequireNotEnqueued(t.Context(), t, a.db, WelcomeEmail{UserID: r.RolledBackUserID}, nil)
				if n := a.count("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", a.queue); n != 0 {
					t.Errorf("jobs in the test's queue: %d, want 0", n)
				}
			})
		}
	})
}

func TestDuplicateEmailIsAConflictAndMakesNoSecondJob(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, srv testServer) {
		a := newTestApp(t, srv)
		email := a.email("grace")

		first := a.postForm("/signup", url.Values{"email": {email}, "name": {"Grace Hopper"}})
		if first.status != http.StatusCreated {
			t.Fatalf("first signup: got %+v, want 201", first)
		}
		body, _ := json.Marshal(map[string]string{"email": email, "name": "Grace again"})
		second := a.post("/signup", "application/json", string(body))
		if second.status != http.StatusConflict || second.Error == "" {
			t.Fatalf("second signup with the same email: got %+v, want 409", second)
		}

		if n := a.usersWithEmail(email); n != 1 {
			t.Errorf("users with email %s: %d, want 1", email, n)
		}
		bunqueuetest.RequireEnqueued(t.Context(), t, a.db, WelcomeEmail{UserID: first.ID}, nil)
		if n := a.count("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", a.queue); n != 1 {
			t.Errorf("jobs in the test's queue: %d, want 1", n)
		}

		// Signups of one new email at once: the unique index lets exactly
		// one in, and each of the others gets a 409 (not a 500), whichever
		// server's duplicate-key error it is.
		const racers = 8
		email = a.email("hedy")
		results := make(chan response, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				results <- a.postForm("/signup", url.Values{"email": {email}, "name": {fmt.Sprintf("Hedy %d", i)}})
			})
		}
		wg.Wait()
		close(results)
		created, conflicts := 0, 0
		for r := range results {
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
				conflicts++
			default:
				t.Errorf("concurrent signup: got %+v, want 201 or 409", r)
			}
		}
		if created != 1 || conflicts != racers-1 {
			t.Errorf("%d concurrent signups with one email: %d created, %d conflicts; want 1 and %d", racers, created, conflicts, racers-1)
		}
		if n := a.usersWithEmail(email); n != 1 {
			t.Errorf("users with email %s: %d, want 1", email, n)
		}
		if n := a.count("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", a.queue); n != 2 {
			t.Errorf("jobs in the test's queue: %d, want 2", n)
		}
	})
}

func TestBadSignupIsRejected(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, srv testServer) {
		a := newTestApp(t, srv)
		for _, tc := range []struct {
			name, contentType, body string
		}{
			{"no email", "application/x-www-form-urlencoded", "name=Nobody"},
			{"not an email", "application/x-www-form-urlencoded", "email=nobody&name=Nobody"},
			{"bad JSON", "application/json", `{"email": `},
		} {
			if r := a.post("/signup", tc.contentType, tc.body); r.status != http.StatusBadRequest || r.Error == "" {
				t.Errorf("%s: got %+v, want 400 with an error", tc.name, r)
			}
		}
		if n := a.count("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", a.queue); n != 0 {
			t.Errorf("jobs in the test's queue: %d, want 0", n)
		}
	})
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testLogger sends the log of the client and the worker to t.Log while
// the test runs.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimSpace(p)))
	}
	return len(p), nil
}
