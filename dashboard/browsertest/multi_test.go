package browsertest

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// multiClient returns a client, not started, of a jobs queue of the
// test's own, named name, on db, configured by qc.
func multiClient(t *testing.T, db *bun.DB, name string, qc bunqueue.JobQueueConfig) *bunqueue.Client {
	t.Helper()
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	t.Cleanup(func() {
		_, _ = db.NewRaw("DELETE FROM bunqueue_queues WHERE name = ?", name).Exec(context.Background())
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{name: qc}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[orderArgs](func(context.Context, bun.IDB, *bunqueue.Job[orderArgs]) error { return nil })))
	return c
}

// queueRow returns the row of the overview's queues table of queue.
func queueRow(t *testing.T, page, queue string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(queue) + `".*?</tr>`).FindString(page)
	require.NotEmpty(t, m, "the row of %s", queue)
	return m
}

// twoClients is one dashboard, mounted under /ops/, of two clients that
// are not started, each on its own server (the one the test runs on and
// the other of MariaDB and PostgreSQL), with a jobs queue of the test's
// own: qa of a, named billing, and qb of b, named mail, which has limits.
type twoClients struct {
	a, b   *bunqueue.Client
	qa, qb string
	srv    *httptest.Server
}

func setupTwoClients(t *testing.T) *twoClients {
	t.Helper()
	here, there := dbtest.Open(t, 0), dbtest.OpenPG(t, 0)
	if dbtest.IsPostgres() {
		there = dbtest.OpenMySQL(t, 0)
	}
	f := &twoClients{qa: dbtest.Name("multia"), qb: dbtest.Name("multib")}
	f.a = multiClient(t, here, f.qa, bunqueue.JobQueueConfig{Workers: 1})
	f.b = multiClient(t, there, f.qb, bunqueue.JobQueueConfig{Workers: 4, GlobalLimit: 2, KeyRate: bunqueue.Rate{N: 3, Per: time.Minute}})
	for i, q := range []struct {
		c  *bunqueue.Client
		db *bun.DB
		q  string
	}{{f.a, here, f.qa}, {f.b, there, f.qb}} {
		t.Cleanup(func() { _, _ = q.db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", q.q) })
		for range 2 + i {
			_, err := q.c.Enqueue(t.Context(), q.db, orderArgs{Name: "waiting"}, &bunqueue.EnqueueOpts{Queue: q.q})
			require.NoError(t, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", dashboard.New(f.a, &dashboard.Options{AllowActions: true,
		ClientName: "billing", Clients: []dashboard.Client{{Name: "mail", Client: f.b}}})))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// paused returns whether c's one queue is paused, as its Stats say.
func paused(t *testing.T, c *bunqueue.Client) bool {
	t.Helper()
	stats, err := c.Stats(t.Context())
	require.NoError(t, err)
	require.Len(t, stats, 1)
	return stats[0].Paused
}

// The overview of two clients lists both clients' queues, each naming
// its client, with the limits in force; pausing and resuming the second
// client's queue reaches its database, and a queue is acted on only
// through the client that has it.
func TestDashboardOfTwoClients(t *testing.T) {
	t.Parallel()
	f := setupTwoClients(t)
	a, b, qa, qb, srv := f.a, f.b, f.qa, f.qb, f.srv
	require.Panics(t, func() {
		dashboard.New(a, &dashboard.Options{ClientName: "x", Clients: []dashboard.Client{{Name: "x", Client: b}}})
	}, "two clients named x")
	require.Panics(t, func() { dashboard.New(a, &dashboard.Options{Clients: []dashboard.Client{{Client: b}}}) }, "no name")

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar}
	get := func(path string) string {
		t.Helper()
		res, err := hc.Get(srv.URL + "/ops/" + path)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return string(body)
	}
	page := get("")
	rowA, rowB := queueRow(t, page, qa), queueRow(t, page, qb)
	require.Contains(t, rowA, `data-client="billing"`)
	require.Contains(t, rowA, `<td class="limits">none</td>`)
	require.Contains(t, rowB, `data-client="mail"`)
	require.Contains(t, rowB, `<td class="limits">2 at once; 3 per minute per limit key</td>`)
	require.Contains(t, rowB, `<input type="hidden" name="client" value="mail">`)

	var d dashboard.Data
	require.NoError(t, json.Unmarshal([]byte(get("data.json")), &d))
	require.Len(t, d.Queues, 2)
	require.Equal(t, []string{qa, qb}, []string{d.Queues[0].Name, d.Queues[1].Name})
	require.Equal(t, []string{"billing", "mail"}, d.QueueClients)
	require.Equal(t, 2, d.Queues[1].GlobalLimit)
	require.Len(t, d.History, 2)

	token := html.UnescapeString(regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1])
	post := func(what string, form url.Values) (int, dashboard.QueueResult) {
		t.Helper()
		form.Set("csrf", token)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/ops/"+what, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		res, err := hc.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var out dashboard.QueueResult
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		return res.StatusCode, out
	}
	status, res := post("pause", url.Values{"name": {qb}})
	require.Equal(t, http.StatusBadRequest, status, "qb is not billing's: %+v", res)
	status, res = post("pause", url.Values{"name": {qb}, "client": {"nobody"}})
	require.Equal(t, http.StatusBadRequest, status, "no such client: %+v", res)
	status, res = post("pause", url.Values{"name": {qa}, "client": {"mail"}})
	require.Equal(t, http.StatusBadRequest, status, "qa is not mail's: %+v", res)
	require.False(t, paused(t, a))
	require.False(t, paused(t, b))

	status, res = post("pause", url.Values{"name": {qb}, "client": {"mail"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.True(t, paused(t, b), "the pause reached the second client's database")
	require.False(t, paused(t, a))
	require.Contains(t, queueRow(t, get(""), qb), `action="resume"`)

	status, res = post("resume", url.Values{"name": {qb}, "client": {"mail"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.False(t, paused(t, b))
	status, res = post("pause", url.Values{"name": {qa}})
	require.Equal(t, http.StatusOK, status, "New's client needs no client field: %+v", res)
	require.True(t, paused(t, a))
	require.False(t, paused(t, b))
}
