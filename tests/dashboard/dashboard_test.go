package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
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

type dashItem struct {
	bun.BaseModel `bun:"table:bq_test_dashboard"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// hostile is a payload and an error that would run script if the page
// did not escape them.
const (
	hostileArgs  = `{"name":"<script>alert('args')</script>"}`
	hostileError = `boom <img src=x onerror="alert('error')"></pre><script>alert(1)</script>`
)

// fixture is a client with one table queue and one jobs queue of the
// test's own, and failed jobs in that jobs queue.
type fixture struct {
	db     *bun.DB
	client *bunqueue.Client
	queue  string  // the jobs queue
	failed []int64 // the failed jobs' ids, oldest first
}

func setup(t *testing.T, failed int) *fixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	f := &fixture{db: db, queue: dbtest.Name("dash")}
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", f.queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", f.queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{f.queue: {Workers: 2}}})
	require.NoError(t, err)
	require.NoError(t, c.Add(bunqueue.NewQueue("dash-table",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *dashItem) error { return nil }, nil)))
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[dashArgs](func(context.Context, bun.IDB, *bunqueue.Job[dashArgs]) error { return nil })))
	f.client = c
	now := time.Now().UTC()
	for i := range failed {
		fj := &bunqueue.FailedJob{JobID: int64(1000 + i), Queue: f.queue, Kind: "dash_test", Args: []byte(hostileArgs),
			Attempts: 3, MaxAttempts: 3, Error: fmt.Sprintf("%s #%d\nsecond line", hostileError, i), CreatedAt: now, FailedAt: now}
		_, err := db.NewInsert().Model(fj).Exec(t.Context())
		require.NoError(t, err)
		f.failed = append(f.failed, fj.ID)
	}
	return f
}

type dashArgs struct{}

func (dashArgs) Kind() string { return "dash_test" }

// get serves a GET of target and returns the response and its body.
func get(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

// post serves a form POST of target with the given cookie (may be nil).
func post(t *testing.T, h http.Handler, target string, form url.Values, cookie *http.Cookie, header ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func (f *fixture) failedLeft(t *testing.T, id int64) bool {
	t.Helper()
	var n int
	require.NoError(t, f.db.NewRaw("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", id).Scan(t.Context(), &n))
	return n == 1
}

// Payloads and errors are untrusted: the page shows them as text.
func TestPageEscapes(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	h := dashboard.New(f.client, nil)
	for _, target := range []string{"/?queue=" + f.queue, "/fragment?queue=" + f.queue} {
		res, body := get(t, h, target)
		require.Equal(t, http.StatusOK, res.StatusCode, target)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		require.Contains(t, body, fmt.Sprintf(`id="failed-%d"`, f.failed[0]), target)
		require.Contains(t, body, "&lt;script&gt;alert(&#39;args&#39;)&lt;/script&gt;", target)
		require.Contains(t, body, "&lt;img src=x onerror=&#34;alert(&#39;error&#39;)&#34;&gt;&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;", target)
		require.NotContains(t, body, "<script>alert", target)
		require.NotContains(t, body, "<img", target)
	}
	res, body := get(t, h, "/")
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	require.NotRegexp(t, regexp.MustCompile(`(src|href)="(https?:)?//`), body, "nothing from other hosts")
	require.Contains(t, body, `<script src="assets/dashboard.js" defer></script>`)
}

// Actions are off unless Options turn them on: no buttons, and a POST is
// refused even with a good token.
func TestActionsOffByDefault(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	h := dashboard.New(f.client, &dashboard.Options{})
	res, body := get(t, h, "/?queue="+f.queue)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, `action="retry"`)
	require.NotContains(t, body, `action="delete"`)
	require.Empty(t, res.Cookies(), "no CSRF cookie when there is nothing to protect")

	// A token that would be good if actions were on.
	on := dashboard.New(f.client, &dashboard.Options{AllowActions: true, CSRFKey: []byte("k")})
	res, body = get(t, on, "/?queue="+f.queue)
	cookie, token := csrfOf(t, res, body)
	off := dashboard.New(f.client, &dashboard.Options{CSRFKey: []byte("k")})
	for _, what := range []string{"/retry", "/delete"} {
		res, body = post(t, off, what, url.Values{"csrf": {token}, "id": {fmt.Sprint(f.failed[0])}}, cookie)
		require.Equal(t, http.StatusForbidden, res.StatusCode, what)
		require.Contains(t, body, "AllowActions")
	}
	require.True(t, f.failedLeft(t, f.failed[0]))
}

// csrfOf returns the CSRF cookie the page set and the token in its forms.
func csrfOf(t *testing.T, res *http.Response, body string) (*http.Cookie, string) {
	t.Helper()
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "bunqueue_csrf" {
			cookie = c
		}
	}
	require.NotNil(t, cookie, "the page sets the CSRF cookie")
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "the forms carry the token")
	return cookie, m[1]
}

// A POST needs the page's token, in the form and the cookie, signed with
// the dashboard's key; a cross-origin POST is refused even with it.
func TestActionsNeedCSRFToken(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	h := dashboard.New(f.client, &dashboard.Options{AllowActions: true})
	res, body := get(t, h, "/?queue="+f.queue)
	require.Contains(t, body, `action="retry"`)
	cookie, token := csrfOf(t, res, body)
	require.Equal(t, cookie.Value, token)
	id := fmt.Sprint(f.failed[0])

	other := dashboard.New(f.client, &dashboard.Options{AllowActions: true})
	res, body = get(t, other, "/")
	otherCookie, otherToken := csrfOf(t, res, body)

	for name, tc := range map[string]struct {
		form   url.Values
		cookie *http.Cookie
		header []string
	}{
		"no token":                     {url.Values{"id": {id}}, cookie, nil},
		"no cookie":                    {url.Values{"id": {id}, "csrf": {token}}, nil, nil},
		"token unlike the cookie":      {url.Values{"id": {id}, "csrf": {token + "x"}}, cookie, nil},
		"another dashboard's token":    {url.Values{"id": {id}, "csrf": {otherToken}}, otherCookie, nil},
		"made-up token in both places": {url.Values{"id": {id}, "csrf": {"abc.def"}}, &http.Cookie{Name: "bunqueue_csrf", Value: "abc.def"}, nil},
		"cross-site request":           {url.Values{"id": {id}, "csrf": {token}}, cookie, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		res, body := post(t, h, "/retry", tc.form, tc.cookie, tc.header...)
		require.Equal(t, http.StatusForbidden, res.StatusCode, "%s: %s", name, body)
		res, _ = post(t, h, "/delete", tc.form, tc.cookie, tc.header...)
		require.Equal(t, http.StatusForbidden, res.StatusCode, name)
	}
	require.True(t, f.failedLeft(t, f.failed[0]), "nothing was done")

	res, _ = get(t, h, "/retry")
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "GET cannot act")

	// With the token: a form post comes back to the page.
	res, _ = post(t, h, "/retry", url.Values{"id": {id}, "csrf": {token}, "queue": {f.queue}}, cookie)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	loc := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "./?"), "relative to the mount point: %s", loc)
	require.Contains(t, loc, "done=retry")
	require.Contains(t, loc, "queue="+f.queue)
	require.False(t, f.failedLeft(t, f.failed[0]))
	var back []string
	require.NoError(t, f.db.NewRaw("SELECT args FROM bunqueue_jobs WHERE queue = ?", f.queue).Scan(t.Context(), &back))
	require.Equal(t, []string{hostileArgs}, back, "the job is back in its queue, payload and all")
	u, err := url.Parse(loc)
	require.NoError(t, err)
	_, body = get(t, h, "/"+loc[2:])
	require.Contains(t, body, fmt.Sprintf("Failed job %s is back in its queue as job ", id), "the page says what happened (%s)", u)
	require.NotContains(t, body, `id="failed-`+id+`"`)

	// From the page's script: JSON.
	del := fmt.Sprint(f.failed[1])
	res, body = post(t, h, "/delete", url.Values{"id": {del}, "csrf": {token}}, cookie, "Accept", "application/json", "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.JSONEq(t, `{"ok": true, "action": "delete", "id": `+del+`}`, body)
	require.False(t, f.failedLeft(t, f.failed[1]))
	res, body = post(t, h, "/delete", url.Values{"id": {del}, "csrf": {token}}, cookie, "Accept", "application/json")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Contains(t, body, `"ok": false`)
	require.Contains(t, body, "no failed job with id "+del)
	res, body = post(t, h, "/retry", url.Values{"id": {"x"}, "csrf": {token}}, cookie)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
}

// data.json has the page's data: the queues, the recent failures and a
// page of failed jobs, as JSON, with the next page's before= id.
func TestJSON(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	h := dashboard.New(f.client, &dashboard.Options{PageSize: 2})
	res, body := get(t, h, "/data.json?queue="+f.queue)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "application/json; charset=utf-8", res.Header.Get("Content-Type"))
	require.NotContains(t, body, "<script>", "JSON escapes < too")

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"generated_at", "queues", "recent_failures", "filter", "failed_jobs", "next_before_id", "actions_enabled", "history", "history_scope"}, keys, body)

	var d dashboard.Data
	require.NoError(t, json.Unmarshal([]byte(body), &d))
	require.False(t, d.ActionsEnabled)
	require.WithinDuration(t, time.Now(), d.GeneratedAt, time.Minute)
	require.Equal(t, []bunqueue.QueueStats{
		{Name: "dash-table", Kind: bunqueue.QueueKindTable, Table: "bq_test_dashboard", Workers: bunqueue.WorkersDefault, Depth: d.Queues[0].Depth},
		{Name: f.queue, Kind: bunqueue.QueueKindJobs, Table: "bunqueue_jobs", Workers: 2},
	}, d.Queues)
	require.Equal(t, []string{"name", "kind", "table", "workers", "depth", "in_flight", "processed_last_minute",
		"processed_last_hour", "failed_last_minute", "failed_last_hour", "paused",
		"global_limit", "key_limit", "key_column", "rate_limit", "key_rate"}, jsonKeys(t, body, "queues"))
	require.Equal(t, dashboard.Filter{Queue: f.queue}, d.Filter)
	require.Len(t, d.FailedJobs, 2)
	require.Equal(t, f.failed[2], d.FailedJobs[0].ID, "newest first")
	j := d.FailedJobs[0]
	require.Equal(t, hostileArgs, j.Args)
	require.Equal(t, len(hostileArgs), j.ArgsBytes)
	require.Equal(t, hostileError+" #2\nsecond line", j.Error)
	require.Equal(t, [3]any{f.queue, "dash_test", 3}, [3]any{j.Queue, j.Kind, j.Attempts})
	require.NotNil(t, d.NextBeforeID)
	require.Equal(t, f.failed[1], *d.NextBeforeID)

	_, body = get(t, h, fmt.Sprintf("/data.json?queue=%s&before=%d", f.queue, *d.NextBeforeID))
	d = dashboard.Data{}
	require.NoError(t, json.Unmarshal([]byte(body), &d))
	require.Len(t, d.FailedJobs, 1)
	require.Equal(t, f.failed[0], d.FailedJobs[0].ID)
	require.Nil(t, d.NextBeforeID, "the last page")

	_, body = get(t, h, fmt.Sprintf("/?queue=%s&before=%d", f.queue, f.failed[2]))
	require.Contains(t, body, `id="newest"`)
	require.Contains(t, body, fmt.Sprintf(`id="failed-%d"`, f.failed[1]))
	require.NotContains(t, body, fmt.Sprintf(`id="failed-%d"`, f.failed[2]))
}

// jsonKeys returns the keys, in order, of the first object of the array
// at key in the JSON object body.
func jsonKeys(t *testing.T, body, key string) []string {
	t.Helper()
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &top))
	var arr []json.RawMessage
	require.NoError(t, json.Unmarshal(top[key], &arr))
	require.NotEmpty(t, arr)
	dec := json.NewDecoder(strings.NewReader(string(arr[0])))
	var keys []string
	_, err := dec.Token()
	require.NoError(t, err)
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, tok.(string))
		var v any
		require.NoError(t, dec.Decode(&v))
	}
	return keys
}

// Mounted under a prefix, as the README shows: the page, its assets, and
// the way back after an action all stay under it.
func TestMounted(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", http.StripPrefix("/bunqueue", dashboard.New(f.client, &dashboard.Options{AllowActions: true, Title: "Jobs <of> the app"})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}

	res, err := c.Get(srv.URL + "/bunqueue") // redirected to /bunqueue/ by the mux
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	page := string(b)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, page, "<title>Jobs &lt;of&gt; the app</title>")
	for _, asset := range []struct{ path, typ string }{{"assets/dashboard.js", "text/javascript"}, {"assets/style.css", "text/css"}} {
		require.Contains(t, page, asset.path)
		res, err := c.Get(srv.URL + "/bunqueue/" + asset.path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, asset.path)
		require.Contains(t, res.Header.Get("Content-Type"), asset.typ)
	}
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err = c.PostForm(srv.URL+"/bunqueue/retry", url.Values{"csrf": {token}, "id": {fmt.Sprint(f.failed[0])}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	loc, err := res.Location()
	require.NoError(t, err)
	require.Equal(t, "/bunqueue/", loc.Path)

	for path, status := range map[string]int{"/bunqueue/nope": 404, "/bunqueue/assets/nope.js": 404, "/bunqueue/fragment": 200, "/bunqueue/data.json": 200} {
		res, err := c.Get(srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, status, res.StatusCode, path)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/bunqueue/", nil)
	res, err = c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

// With thousands of failed jobs the page lists one page at a time.
func TestManyFailedJobs(t *testing.T) {
	t.Parallel()
	f := setup(t, 0)
	const n = 10000
	for from := 0; from < n; from += 1000 {
		var values []string
		for i := from; i < from+1000; i++ {
			values = append(values, fmt.Sprintf("(%d, '%s', 'dash_test', '{\"n\":%d}', 0, 1, 1, 'boom %d', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)", i, f.queue, i, i))
		}
		dbtest.Exec(t, f.db, "INSERT INTO bunqueue_failed_jobs (job_id, queue, kind, args, priority, attempts, max_attempts, error, created_at, failed_at) VALUES "+strings.Join(values, ","))
	}
	h := dashboard.New(f.client, &dashboard.Options{AllowActions: true})
	began := time.Now()
	res, body := get(t, h, "/?queue="+f.queue)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Less(t, time.Since(began), 5*time.Second)
	require.Equal(t, dashboard.PageSizeDefault, strings.Count(body, `class="job"`))
	require.Less(t, len(body), 200<<10, "one page, not ten thousand jobs")
	require.Contains(t, body, `id="older"`)
}
