package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue"
)

// The app as several app servers on one database: each with its pool, its
// client, its worker and its HTTP server, all on one jobs queue, the
// signups spread across them.
const (
	fleetServers = 3
	fleetUsers   = 3000
	fleetRate    = 500 // signups per second, across the servers
	// fleetSignupLimit bounds the signups' time, on a loaded machine:
	// the users are those signed up by then.
	fleetSignupLimit = 2 * fleetUsers / fleetRate * time.Second
)

// TestFleetSendsEachWelcomeEmailOnce signs fleetUsers users up at
// fleetRate through fleetServers app servers on one MySQL or MariaDB
// server, and requires each user's welcome email recorded once and sent
// once: the worker's sends at most 0.1% above the users (a deadlock that
// retries a batch of jobs runs the batch's sends again).
func TestFleetSendsEachWelcomeEmailOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, testServers()[0], fleetServers)
	users := f.signUp(t, fleetUsers, fleetRate, fleetSignupLimit)
	f.waitRecorded(t, users, 30*time.Second)
	f.stop(t)
	f.check(t, users)
}

// fleet is the app as several app servers on one database.
type fleet struct {
	apps   []*fleetApp
	queue  string // the jobs queue of every app
	domain string // the email domain of the test's users
	sends  *sendCounter
	admin  *bun.DB // the first app's pool, for the checks
}

// fleetApp is one app server: its pool, client and HTTP server.
type fleetApp struct {
	client *bunqueue.Client
	url    string
}

// newFleet starts n app servers of srv's database, wired as main wires
// one (runOn), each on a pool of its own, on a jobs queue of the test's.
func newFleet(t *testing.T, srv testServer, n int) *fleet {
	t.Helper()
	suffix := randomSuffix()
	dsn := srv.dsn(t)
	f := &fleet{queue: "signup_fleet_" + suffix, domain: suffix + ".signup-fleet.example", sends: &sendCounter{}}
	for i := range n {
		db := openTestDB(t, srv.kind, dsn)
		if i == 0 {
			// The checks use the first server's pool: the server holds
			// too few connections for a pool more, with the other tests.
			f.admin = db
			t.Cleanup(func() { deleteTestRows(t, db, f.queue, f.domain) }) // after the clients stopped
		}
		f.apps = append(f.apps, f.startApp(t, db))
	}
	return f
}

// startApp sets an app server up on db and starts its worker.
func (f *fleet) startApp(t *testing.T, db *bun.DB) *fleetApp {
	t.Helper()
	ctx := t.Context()
	if err := bunqueue.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := createTables(ctx, db); err != nil {
		t.Fatal(err)
	}
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		Logger:       testLogger(t),
		PollInterval: pollInterval, // main's
		JobQueues:    map[string]bunqueue.JobQueueConfig{f.queue: {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := bunqueue.AddWorker(client, welcomeWorker(slog.New(f.sends))); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	app := &fleetApp{client: client}
	t.Cleanup(func() { app.stop(t) }) // before the rows are deleted
	hs := httptest.NewServer(newServer(db, client, f.queue))
	t.Cleanup(hs.Close)
	app.url = hs.URL
	return app
}

// stop stops the app's worker, once.
func (a *fleetApp) stop(t *testing.T) {
	if a.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.client.Stop(ctx); err != nil {
		t.Error(err)
	}
	a.client = nil
}

// stop stops every app's worker, so that no job runs during the checks.
func (f *fleet) stop(t *testing.T) {
	for _, a := range f.apps {
		a.stop(t)
	}
}

// signUp posts n signups at rate a second, each to the next app server in
// turn, and requires each to create its user; it posts no more after
// limit, and returns how many it posted.
func (f *fleet) signUp(t *testing.T, n, rate int, limit time.Duration) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	sem := make(chan struct{}, 64) // requests in flight
	var wg sync.WaitGroup
	began := time.Now()
	posted := 0
	for i := range n {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		sem <- struct{}{}
		if time.Since(began) > limit {
			<-sem
			break
		}
		posted++
		wg.Go(func() {
			defer func() { <-sem }()
			form := url.Values{"email": {fmt.Sprintf("user%d@%s", i, f.domain)}, "name": {fmt.Sprintf("User %d", i)}}
			resp, err := hc.PostForm(f.apps[i%len(f.apps)].url+"/signup", form)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("signup %d: status %d, want 201", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	t.Logf("%d signups across %d app servers in %.1f s (%d/s offered)", posted, len(f.apps), time.Since(began).Seconds(), rate)
	if t.Failed() {
		t.FailNow()
	}
	return posted
}

// recorded counts the test's users whose welcome email is recorded.
func (f *fleet) recorded(t *testing.T) int {
	t.Helper()
	var n int
	err := f.admin.NewRaw("SELECT COUNT(*) FROM example_signup_sent AS s JOIN example_signup_user AS u ON u.id = s.user_id WHERE u.email LIKE ?",
		"%@"+f.domain).Scan(context.Background(), &n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitRecorded waits until n welcome emails are recorded.
func (f *fleet) waitRecorded(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	began := time.Now()
	for f.recorded(t) < n {
		if time.Since(began) > timeout {
			t.Fatalf("after %s, %d of %d welcome emails recorded", timeout, f.recorded(t), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("every welcome email recorded %.1f s after the signups", time.Since(began).Seconds())
}

// check requires, once the workers stopped, each of the n users' welcome
// email recorded once and sent once, the sends at most 0.1% above n.
func (f *fleet) check(t *testing.T, n int) {
	t.Helper()
	if got := f.recorded(t); got != n {
		t.Errorf("welcome emails recorded: %d, want %d, one per user", got, n)
	}
	var jobs int
	if err := f.admin.NewRaw("SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", f.queue).Scan(context.Background(), &jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 0 {
		t.Errorf("jobs left in the queue: %d, want 0", jobs)
	}
	users, total, twice := f.sends.counts()
	if users != n {
		t.Errorf("users sent a welcome email: %d, want %d", users, n)
	}
	if allowed := n / 1000; total > n+allowed {
		t.Errorf("welcome emails sent: %d for %d users, %d users more than once: %d extra sends, "+
			"more than the %d (0.1%%) allowed", total, n, twice, total-n, allowed)
	}
	t.Logf("%d welcome emails sent for %d users by %d app servers (%d users more than once)", total, n, len(f.apps), twice)
}

// sendCounter is the workers' logger: it counts the "sending welcome
// email" records per user_id, and drops every record.
type sendCounter struct {
	mu    sync.Mutex
	sends map[int64]int
}

func (c *sendCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *sendCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sending welcome email" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "user_id" {
			return true
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.sends == nil {
			c.sends = map[int64]int{}
		}
		c.sends[a.Value.Int64()]++
		return false
	})
	return nil
}

func (c *sendCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

func (c *sendCounter) WithGroup(string) slog.Handler { return c }

// counts returns the users sent an email, the emails sent, and the users
// sent more than one.
func (c *sendCounter) counts() (users, total, twice int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.sends {
		users++
		total += k
		if k > 1 {
			twice++
		}
	}
	return users, total, twice
}

// deleteTestRows deletes the jobs of a test's queue (pending or failed),
// then its users of domain; their welcome email records go with them (ON
// DELETE CASCADE). The tests run in parallel, and a DELETE by a LIKE reads
// other tests' rows too: each runs at READ COMMITTED, where MySQL keeps
// locks only on the rows it deletes (at REPEATABLE READ it locks every row
// it reads, and deadlocks with other tests' workers); a statement chosen
// as a deadlock's victim anyway runs again.
func deleteTestRows(t *testing.T, db *bun.DB, queue, domain string) {
	ctx := context.Background()
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	if db.Dialect().Name() == dialect.SQLite {
		opts = nil // one writer at a time: no row locks to keep
	}
	for _, q := range []struct {
		query string
		arg   string
	}{
		{"DELETE FROM bunqueue_jobs WHERE queue = ?", queue},
		{"DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue},
		{"DELETE FROM example_signup_user WHERE email LIKE ?", "%@" + domain},
	} {
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			err = db.RunInTx(ctx, opts, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.NewRaw(q.query, q.arg).Exec(ctx)
				return err
			})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "deadlock") {
				break
			}
		}
		if err != nil {
			t.Error(err)
		}
	}
}
