package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// welcomeEmail is the job of the API's tests, as docs/dashboard.md's
// examples show it.
type welcomeEmail struct {
	To string `json:"to"`
}

func (welcomeEmail) Kind() string { return "welcome_email" }

// apiFixture is a client that is not started, so that its jobs stay
// where the test puts them, with a jobs queue of the test's own (the
// doc's "emails"), two failed jobs, a scheduled job and a pending one.
type apiFixture struct {
	db        *bun.DB
	client    *bunqueue.Client
	queue     string
	failed    []int64 // FailedJob.ID, oldest first
	scheduled int64
	pending   int64
	// orders is a table queue (the doc's "orders", over the tests' shared
	// table), whose rows failed for good are deadRows, by key: the app's
	// state that FailedRows reads and RetryRow changes.
	orders   string
	mu       sync.Mutex
	deadRows map[string]string
}

// options returns Options with the fixture's FailedRows and RetryRow for
// its table queue.
func (f *apiFixture) options(o dashboard.Options) *dashboard.Options {
	o.FailedRows = map[string]func(context.Context) ([]dashboard.FailedRow, error){f.orders: func(context.Context) ([]dashboard.FailedRow, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var rows []dashboard.FailedRow
		for key, msg := range f.deadRows {
			rows = append(rows, dashboard.FailedRow{Key: key, Error: msg})
		}
		return rows, nil
	}}
	o.RetryRow = map[string]func(context.Context, string) error{f.orders: func(_ context.Context, key string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.deadRows, key)
		return nil
	}}
	return &o
}

func setupAPI(t *testing.T) *apiFixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	f := &apiFixture{db: db, queue: dbtest.Name("emails"), orders: dbtest.Name("orders"), deadRows: map[string]string{"id=7": "card declined"}}
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", f.queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", f.queue)
		_, _ = db.Exec("DELETE FROM bunqueue_queues WHERE name = ?", f.queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{f.queue: {Workers: 4}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[welcomeEmail](func(context.Context, bun.IDB, *bunqueue.Job[welcomeEmail]) error { return nil })))
	require.NoError(t, c.Add(bunqueue.NewQueue(f.orders,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(context.Context, bun.Tx, *dashItem) error { return nil }, nil)))
	f.client = c
	now := time.Now().UTC()
	for i, to := range []string{"ann@example.com", "bob@example.com"} {
		fj := &bunqueue.FailedJob{JobID: int64(100 + i), Queue: f.queue, Kind: "welcome_email", Args: []byte(`{"to":"` + to + `"}`),
			Attempts: 3, MaxAttempts: 3, Error: "smtp: 550 mailbox unavailable", CreatedAt: now.Add(-time.Hour), FailedAt: now}
		_, err := db.NewInsert().Model(fj).Exec(t.Context())
		require.NoError(t, err)
		f.failed = append(f.failed, fj.ID)
	}
	res, err := c.Enqueue(t.Context(), db, welcomeEmail{To: "cy@example.com"}, &bunqueue.EnqueueOpts{Queue: f.queue, Delay: time.Hour})
	require.NoError(t, err)
	f.scheduled = res.ID
	res, err = c.Enqueue(t.Context(), db, welcomeEmail{To: "dee@example.com"}, &bunqueue.EnqueueOpts{Queue: f.queue})
	require.NoError(t, err)
	f.pending = res.ID
	return f
}

// serve mounts a dashboard of c with opts under /bunqueue/ of a test
// server.
func serve(t *testing.T, c *bunqueue.Client, opts *dashboard.Options) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", http.StripPrefix("/bunqueue", dashboard.New(c, opts)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// call sends method path (below /bunqueue/) to srv with form (a POST
// when not nil) and headers, pairs of name and value, and returns the
// response and its body.
func call(t *testing.T, srv *httptest.Server, method, path string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, srv.URL+"/bunqueue/"+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

// panicOf returns what fn panicked with, as text, or "".
func panicOf(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return ""
}

// Options.APIToken must be long and of the token alphabet; New's panic
// names the field and never quotes the token.
func TestAPITokenValidated(t *testing.T) {
	t.Parallel()
	f := setupAPI(t)
	for _, bad := range []string{
		"short-secret-7f3a",
		strings.Repeat("a", dashboard.APITokenMinLength-1),
		strings.Repeat("s3cr3t", 6) + " x",
		strings.Repeat("s3cr3t", 6) + "\n",
		strings.Repeat("geheimé", 6),
		strings.Repeat("=", 40),
		strings.Repeat("s3cr3t", 3) + "=" + strings.Repeat("s3cr3t", 3),
	} {
		msg := panicOf(func() { dashboard.New(f.client, &dashboard.Options{APIToken: bad}) })
		require.Contains(t, msg, "Options.APIToken", "%q", bad)
		require.NotContains(t, msg, bad, "the message does not quote the token")
	}
	for _, good := range []string{docToken, "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5.-_~+/==", strings.Repeat("A", dashboard.APITokenMinLength)} {
		require.Empty(t, panicOf(func() { dashboard.New(f.client, &dashboard.Options{APIToken: good}) }), "%q", good)
	}
}

// A script acts with the token alone (no cookie, no CSRF token); a
// request with another Bearer token is a 401 wherever it goes; a
// browser's request, without the token, still needs the CSRF token; the
// token does not pass what AllowActions, Authorize or the cross-origin
// check refuse; without Options.APIToken an Authorization header is the
// app's.
func TestAPIToken(t *testing.T) {
	t.Parallel()
	f := setupAPI(t)
	srv := serve(t, f.client, &dashboard.Options{AllowActions: true, APIToken: docToken})
	bearer := "Bearer " + docToken
	form := func() url.Values { return url.Values{"name": {f.queue}} }

	res, body := call(t, srv, http.MethodPost, "pause", form(), "Authorization", bearer, "Accept", "application/json")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.JSONEq(t, `{"ok": true, "action": "pause", "queue": "`+f.queue+`", "paused": true}`, body)
	require.True(t, pausedIn(t, f.client, f.queue))
	res, body = call(t, srv, http.MethodPost, "resume", form(), "Authorization", "bearer "+docToken)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the scheme in any case; without Accept JSON, a browser's answer: %s", body)
	require.False(t, pausedIn(t, f.client, f.queue))

	// Another token: 401 wherever it goes, nothing done, the token never
	// in the answer.
	for _, wrong := range []string{"Bearer " + strings.Repeat("0", 64), "Bearer " + docToken[:40], "Bearer " + docToken + "x", "Bearer "} {
		res, body = call(t, srv, http.MethodPost, "pause", form(), "Authorization", wrong, "Accept", "application/json")
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s: %s", wrong, body)
		require.Equal(t, `Bearer realm="bunqueue dashboard", error="invalid_token"`, res.Header.Get("WWW-Authenticate"))
		require.Contains(t, body, "Options.APIToken")
		for _, path := range []string{"data.json", "", "jobs", "job?id=1", "assets/style.css"} {
			res, body := call(t, srv, http.MethodGet, path, nil, "Authorization", wrong)
			require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s %s: %s", wrong, path, body)
			require.NotContains(t, body, docToken)
		}
		res, body = call(t, srv, http.MethodPost, "job-action", url.Values{"action": {"cancel"}, "id": {fmt.Sprint(f.pending)}},
			"Authorization", wrong, "Accept", "application/json")
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	}
	require.False(t, pausedIn(t, f.client, f.queue))
	rec, err := f.client.JobGet(t.Context(), f.pending)
	require.NoError(t, err)
	require.Equal(t, bunqueue.JobStatePending, rec.State, "nothing was cancelled")

	// A browser's path keeps its CSRF check: no token, or the app's Basic
	// credentials (which a browser sends by itself), is not enough.
	for _, header := range [][]string{nil, {"Authorization", "Basic YWRtaW46c2VjcmV0"}} {
		res, body = call(t, srv, http.MethodPost, "pause", form(), append(header, "Accept", "application/json")...)
		require.Equal(t, http.StatusForbidden, res.StatusCode, body)
		require.Contains(t, body, "CSRF token")
	}
	// A request the browser marks cross-site is refused, token or not.
	res, body = call(t, srv, http.MethodPost, "pause", form(), "Authorization", bearer, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.False(t, pausedIn(t, f.client, f.queue))

	// The token does not turn actions on.
	off := serve(t, f.client, &dashboard.Options{APIToken: docToken})
	res, body = call(t, off, http.MethodPost, "pause", form(), "Authorization", bearer)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Contains(t, body, "AllowActions")
	res, _ = call(t, off, http.MethodGet, "data.json", nil, "Authorization", bearer)
	require.Equal(t, http.StatusOK, res.StatusCode, "reading needs no actions")

	// Authorize is asked, and tells the script by ViaAPIToken.
	var asked []string
	narrow := serve(t, f.client, &dashboard.Options{AllowActions: true, APIToken: docToken,
		Authorize: func(r *http.Request, action string) bool {
			asked = append(asked, fmt.Sprintf("%s %v", action, dashboard.ViaAPIToken(r)))
			return action == dashboard.ActionView || dashboard.ViaAPIToken(r)
		}})
	res, body = call(t, narrow, http.MethodGet, "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	cookie, token := csrfOf(t, res, body)
	res, body = call(t, narrow, http.MethodPost, "pause", url.Values{"name": {f.queue}, "csrf": {token}}, "Cookie", cookie.Name+"="+cookie.Value)
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a browser's session that Authorize refuses: %s", body)
	require.Contains(t, body, "Authorize")
	res, body = call(t, narrow, http.MethodPost, "pause", form(), "Authorization", bearer)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.True(t, pausedIn(t, f.client, f.queue))
	require.Contains(t, asked, "view false")
	require.Contains(t, asked, "pause false")
	require.Contains(t, asked, "pause true")

	// Without Options.APIToken, the dashboard leaves Authorization to the
	// app: a Bearer header is no 401, and no way past the CSRF check.
	plain := serve(t, f.client, &dashboard.Options{AllowActions: true})
	res, _ = call(t, plain, http.MethodGet, "data.json", nil, "Authorization", bearer)
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, body = call(t, plain, http.MethodPost, "resume", form(), "Authorization", bearer)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Contains(t, body, "CSRF token")
	require.True(t, pausedIn(t, f.client, f.queue))
}

// Each address that answers JSON has its own answer, refused or not:
// pause and resume a QueueResult, retry and delete an ActionResult,
// job-action a JobActionResult, data.json an ErrorResult.
func TestReplyShapes(t *testing.T) {
	t.Parallel()
	f := setupAPI(t)
	keys := func(body string) []string {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	jsonHeader := []string{"Accept", "application/json"}
	off := serve(t, f.client, nil) // actions off: every action refused
	for _, tc := range []struct {
		method, path string
		form         url.Values
		status       int
		keys         string
	}{
		{"POST", "pause", url.Values{"name": {f.queue}}, 403, "action error ok queue"},
		{"POST", "resume", url.Values{"name": {f.queue}, "client": {"main"}}, 403, "action client error ok queue"},
		{"GET", "pause", nil, 405, "action error ok queue"},
		{"POST", "retry", url.Values{"id": {fmt.Sprint(f.failed[0])}}, 403, "action error id ok"},
		{"POST", "delete", url.Values{"id": {"x"}}, 403, "action error id ok"},
		{"POST", "job-action", url.Values{"action": {"retry"}, "id": {fmt.Sprint(f.pending)}}, 403, "action error jobs ok"},
		{"POST", "data.json", url.Values{}, 405, "error"},
	} {
		res, body := call(t, off, tc.method, tc.path, tc.form, jsonHeader...)
		require.Equal(t, tc.status, res.StatusCode, "%s %s: %s", tc.method, tc.path, body)
		require.Equal(t, strings.Fields(tc.keys), keys(body), "%s %s: %s", tc.method, tc.path, body)
	}
	var pause dashboard.QueueResult
	_, body := call(t, off, http.MethodPost, "pause", url.Values{"name": {f.queue}}, jsonHeader...)
	require.NoError(t, json.Unmarshal([]byte(body), &pause))
	require.Equal(t, dashboard.QueueResult{Action: "pause", Queue: f.queue,
		Error: "actions are off: the app turns them on with dashboard.Options.AllowActions"}, pause)

	blind := serve(t, f.client, &dashboard.Options{Authorize: func(*http.Request, string) bool { return false }})
	res, body := call(t, blind, http.MethodGet, "data.json", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.JSONEq(t, `{"error": "not authorized to view: the app's dashboard.Options.Authorize refused it"}`, body)
	res, body = call(t, blind, http.MethodGet, "", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Equal(t, "bunqueue dashboard: not authorized to view: the app's dashboard.Options.Authorize refused it\n", body, "a page's refusal is text")
}
