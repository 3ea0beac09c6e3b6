package browsertest

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// orderArgs is the jobs' args: a name that would run script if the pages
// did not escape it.
type orderArgs struct {
	Name  string `json:"name"`
	Items []int  `json:"items"`
}

func (orderArgs) Kind() string { return "browser_order" }

const hostileName = `<script>window.pwned=1</script>`

// jobsFixture is a client that is not started, so its jobs stay where the
// test puts them, with three pending jobs, one scheduled and one failed
// (cancelled) in a queue of the test's own, and a dashboard of it
// mounted under /ops/.
type jobsFixture struct {
	db      *bun.DB
	client  *bunqueue.Client
	queue   string
	pending []int64 // newest first, as the browser lists them
	sched   int64
	failed  int64
	srv     *httptest.Server
	http    *http.Client
}

func setupJobs(t *testing.T, opts *dashboard.Options) *jobsFixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	f := &jobsFixture{db: db, queue: dbtest.Name("dashjobs")}
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", f.queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", f.queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{f.queue: {Workers: 1}}})
	require.NoError(t, err)
	f.client = c
	enqueue := func(o bunqueue.EnqueueOpts) int64 {
		o.Queue = f.queue
		res, err := c.Enqueue(t.Context(), db, orderArgs{Name: hostileName, Items: []int{1, 2}}, &o)
		require.NoError(t, err)
		return res.ID
	}
	f.failed = enqueue(bunqueue.EnqueueOpts{Metadata: map[string]string{"tenant": "<b>acme</b>"}})
	_, err = c.JobCancel(t.Context(), f.failed)
	require.NoError(t, err)
	f.sched = enqueue(bunqueue.EnqueueOpts{Delay: time.Hour})
	for range 3 {
		f.pending = append([]int64{enqueue(bunqueue.EnqueueOpts{})}, f.pending...)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", dashboard.New(c, opts)))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	f.http = &http.Client{Jar: jar}
	return f
}

// get returns the status and body of GET path, below /ops/.
func (f *jobsFixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := f.http.Get(f.srv.URL + "/ops/" + path)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// post posts form to job-action with the CSRF token of the job browser,
// as JSON, and returns the status and the answer.
func (f *jobsFixture) post(t *testing.T, form url.Values, header http.Header) (int, dashboard.JobActionResult) {
	t.Helper()
	_, page := f.get(t, "jobs?queue="+f.queue)
	if m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page); m != nil {
		form.Set("csrf", html.UnescapeString(m[1]))
	}
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/ops/job-action", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := f.http.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out dashboard.JobActionResult
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// rowIDs returns the ids of the job rows of a job browser page, in order.
func rowIDs(t *testing.T, page string) []int64 {
	t.Helper()
	var ids []int64
	for _, m := range regexp.MustCompile(`<tr id="job-(\d+)"`).FindAllStringSubmatch(page, -1) {
		id, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// link returns the href of the link of id on page, unescaped.
func link(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`href="([^"]*)" id="` + id + `"`).FindStringSubmatch(page)
	require.NotNil(t, m, "the page has a link #%s", id)
	return html.UnescapeString(m[1])
}

// The job browser lists the jobs of a state, a page at a time, with Next
// and Previous following JobListPage's cursor; an id shows that job.
func TestJobBrowserStatesAndPages(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{PageSize: 2})
	status, page := f.get(t, "jobs?state=pending&queue="+f.queue)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, f.pending[:2], rowIDs(t, page), "the two newest pending jobs")
	require.NotContains(t, page, `id="previous"`)
	next := link(t, page, "next")
	require.False(t, strings.HasPrefix(next, "/"), "a relative link, good under any prefix: %s", next)

	_, page2 := f.get(t, next)
	require.Equal(t, f.pending[2:], rowIDs(t, page2), "the last pending job")
	require.NotContains(t, page2, `id="next"`, "the last page")
	_, back := f.get(t, link(t, page2, "previous"))
	require.Equal(t, f.pending[:2], rowIDs(t, back), "Previous is the first page again")

	for state, want := range map[string][]int64{"scheduled": {f.sched}, "failed": {f.failed}, "running": nil, "completed": nil} {
		_, page := f.get(t, "jobs?state="+state+"&queue="+f.queue)
		require.Equal(t, want, rowIDs(t, page), state)
	}
	_, all := f.get(t, "jobs?queue="+f.queue)
	require.Equal(t, []int64{f.pending[0], f.pending[1]}, rowIDs(t, all), "all states, newest first")
	_, one := f.get(t, fmt.Sprintf("jobs?id=%d", f.sched))
	require.Equal(t, []int64{f.sched}, rowIDs(t, one), "the job of the id")
	_, none := f.get(t, "jobs?id=999999999999")
	require.Contains(t, none, "No job with id 999999999999.")
	_, kind := f.get(t, "jobs?kind=no_such_kind&queue="+f.queue)
	require.Empty(t, rowIDs(t, kind))
	require.NotContains(t, all, hostileName, "escaped")
}

// The When column says which time each row shows, by the job's state:
// due for a waiting job (a scheduled one in the future), failed for a
// failed one; a note under the table, that the column's header points
// to, says what each word means.
func TestJobBrowserWhenColumn(t *testing.T) {
	f := setupJobs(t, nil)
	_, page := f.get(t, "jobs?queue="+f.queue)
	require.Contains(t, page, `<th scope="col" aria-describedby="when-note">When (UTC)</th>`)
	require.Regexp(t, `<p class="meta" id="when-note">When, in UTC, is the time that matters in the job's state, and says which: <em>due</em>`, page)
	cell := func(page string, id int64) (string, time.Time) {
		t.Helper()
		row := regexp.MustCompile(fmt.Sprintf(`(?s)<tr id="job-%d".*?</tr>`, id)).FindString(page)
		m := regexp.MustCompile(`<td class="when"><span class="when-word">([^<]+)</span> <time datetime="([^"]+)">`).FindStringSubmatch(row)
		require.NotNil(t, m, "job %d's row has a When: %s", id, row)
		at, err := time.Parse(time.RFC3339Nano, m[2])
		require.NoError(t, err)
		return m[1], at
	}
	word, at := cell(page, f.pending[0])
	require.Equal(t, "due", word)
	require.WithinDuration(t, time.Now(), at, time.Minute, "a pending job is due since it was enqueued")
	word, at = cell(page, f.sched)
	require.Equal(t, "due", word)
	require.WithinDuration(t, time.Now().Add(time.Hour), at, time.Minute, "a scheduled job is due in an hour")
	_, failed := f.get(t, "jobs?state=failed&queue="+f.queue)
	word, at = cell(failed, f.failed)
	require.Equal(t, "failed", word)
	require.WithinDuration(t, time.Now(), at, time.Minute)
}

// The job page shows the args indented, with < as the page's &lt; and
// not Go's \u003c, the metadata, the error and the times; an unknown id
// is a 404 that says why.
func TestJobPage(t *testing.T) {
	f := setupJobs(t, nil)
	status, page := f.get(t, fmt.Sprintf("job?id=%d", f.failed))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "{\n  &#34;name&#34;: &#34;&lt;script&gt;window.pwned=1&lt;/script&gt;&#34;,\n  &#34;items&#34;: [\n    1,\n    2\n  ]\n}")
	require.NotContains(t, page, `\u003c`)
	require.NotContains(t, page, hostileName)
	require.Contains(t, page, "&#34;tenant&#34;: &#34;&lt;b&gt;acme&lt;/b&gt;&#34;", "the metadata")
	require.Contains(t, page, "bunqueue: cancelled with JobCancel", "the last error")
	require.Contains(t, page, `<span class="state state-failed">failed</span>`)
	require.NotContains(t, page, `name="action"`, "no buttons without AllowActions")

	status, page = f.get(t, "job?id=999999999999")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, page, "No job with this id")
	status, _ = f.get(t, "job?id=x")
	require.Equal(t, http.StatusBadRequest, status)
}

// The trace link: Options.TraceURL gets the trace id a failed job was
// enqueued with.
func TestJobPageTraceLink(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{TraceURL: func(id string) string { return "https://traces.example/trace/" + id }})
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	_, err := f.db.NewRaw("UPDATE bunqueue_failed_jobs SET trace_context = ? WHERE job_id = ?",
		[]byte("traceparent=00-"+traceID+"-00f067aa0ba902b7-01\n"), f.failed).Exec(t.Context())
	require.NoError(t, err)
	_, page := f.get(t, fmt.Sprintf("job?id=%d", f.failed))
	require.Equal(t, "https://traces.example/trace/"+traceID, link(t, page, "trace"))
	_, page = f.get(t, fmt.Sprintf("job?id=%d", f.sched))
	require.NotContains(t, page, `id="trace"`, "a waiting job's record has no trace context")
}

// Actions on a selection and on one job, through the job control API:
// cancel, run now, retry and delete each do what they say, an action the
// job's state does not allow says why, and Authorize refuses with 403.
func TestJobActions(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true, Authorize: func(r *http.Request, action string) bool {
		return action != dashboard.ActionDelete || r.Header.Get("X-Role") == "admin"
	}})
	state := func(id int64) bunqueue.JobState {
		rec, err := f.client.JobGet(t.Context(), id)
		require.NoError(t, err)
		return rec.State
	}
	_, page := f.get(t, "jobs?queue="+f.queue)
	require.Contains(t, page, `value="cancel"`)
	require.NotContains(t, page, `value="delete"`, "Authorize hides what it refuses")

	status, res := f.post(t, url.Values{"action": {"run_now"}, "id": {strconv.FormatInt(f.sched, 10)}}, nil)
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.Equal(t, bunqueue.JobStatePending, state(f.sched))

	ids := url.Values{"action": {"cancel"}, "id": {strconv.FormatInt(f.pending[0], 10), strconv.FormatInt(f.pending[1], 10)}}
	status, res = f.post(t, ids, nil)
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.True(t, res.OK)
	require.Len(t, res.Jobs, 2)
	for _, j := range res.Jobs {
		require.Equal(t, bunqueue.JobStatePending, j.Was)
		require.Equal(t, bunqueue.JobStateFailed, state(j.ID))
	}

	status, res = f.post(t, url.Values{"action": {"retry"}, "id": {strconv.FormatInt(f.failed, 10), strconv.FormatInt(f.sched, 10)}}, nil)
	require.Equal(t, http.StatusConflict, status, "the second is not failed: %+v", res)
	require.False(t, res.OK)
	require.True(t, res.Jobs[0].OK)
	require.Positive(t, res.Jobs[0].NewJobID)
	require.Equal(t, bunqueue.JobStatePending, state(res.Jobs[0].NewJobID))
	require.Contains(t, res.Jobs[1].Error, "only a failed or cancelled job can be retried")

	del := url.Values{"action": {"delete"}, "id": {strconv.FormatInt(f.pending[2], 10)}}
	status, res = f.post(t, del, nil)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, res.Error, "not authorized to delete")
	require.Equal(t, bunqueue.JobStatePending, state(f.pending[2]), "nothing done")
	status, res = f.post(t, del, http.Header{"X-Role": {"admin"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	_, err := f.client.JobGet(t.Context(), f.pending[2])
	require.ErrorIs(t, err, bunqueue.ErrJobNotFound)

	status, res = f.post(t, url.Values{"action": {"cancel"}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, res.Error, "no job selected")
}

// Without a CSRF token, and with actions off, nothing is done: 403, with
// the reason.
func TestJobActionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *dashboard.Options
		want string
	}{
		{"read-only", nil, "actions are off"},
		{"no token", &dashboard.Options{AllowActions: true}, "missing or invalid CSRF token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setupJobs(t, tc.opts)
			form := url.Values{"action": {"cancel"}, "id": {strconv.FormatInt(f.pending[0], 10)}}
			res, err := http.Post(f.srv.URL+"/ops/job-action", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusForbidden, res.StatusCode)
			require.Contains(t, string(body), tc.want)
			rec, err := f.client.JobGet(t.Context(), f.pending[0])
			require.NoError(t, err)
			require.Equal(t, bunqueue.JobStatePending, rec.State, "nothing done")
			_, page := f.get(t, "jobs?queue="+f.queue)
			require.Equal(t, tc.opts != nil, strings.Contains(page, `type="checkbox"`), "checkboxes only with actions")
			require.True(t, slices.Contains(rowIDs(t, page), f.pending[0]))
		})
	}
}

// An action on everything a tab and filter match: the pending jobs of
// the queue are cancelled, and nothing else is touched.
func TestJobActionOnFilter(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true})
	status, res := f.post(t, url.Values{"action": {"cancel"}, "matching": {"1"}, "state": {"pending"}, "queue": {f.queue}}, nil)
	require.Equal(t, http.StatusOK, status, "%+v", res)
	var ids []int64
	for _, j := range res.Jobs {
		require.True(t, j.OK, "%+v", j)
		ids = append(ids, j.ID)
	}
	require.Equal(t, f.pending, ids, "the pending jobs, newest first")
	rec, err := f.client.JobGet(t.Context(), f.sched)
	require.NoError(t, err)
	require.Equal(t, bunqueue.JobStateScheduled, rec.State, "the scheduled job is not in the filter")

	status, res = f.post(t, url.Values{"action": {"cancel"}, "matching": {"1"}, "state": {"pending"}, "queue": {f.queue}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "the filter matches no job", res.Error)
	status, res = f.post(t, url.Values{"action": {"cancel"}, "matching": {"1"}, "state": {"waiting"}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, res.Error, `The state "waiting" is not one of`)
	status, page := f.get(t, "jobs?state=waiting")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "The state &#34;waiting&#34; is not one of")
}

// fillOrders inserts n jobs of f's queue, newer than its own, whose
// args are {"name":"filler"}, in one INSERT ... SELECT.
func (f *jobsFixture) fillOrders(t *testing.T, n int) {
	t.Helper()
	_, err := f.db.NewRaw("INSERT INTO bunqueue_jobs (queue, kind, args, state, max_attempts, run_at, created_at) "+
		"SELECT ?, 'browser_order', '{\"name\":\"filler\"}', 0, 3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM ("+dbtest.Series(n)+") AS s",
		f.queue).Exec(t.Context())
	require.NoError(t, err)
}

// The search box: it finds a job by its args or its error, % and _ as
// written; the tabs, Next and the filter-wide action keep it; a page
// whose search range ended before the jobs did says how many it looked
// through, and its Next finds the older match; a bad search is a 400
// that names the field.
func TestJobBrowserSearch(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true, PageSize: 2})
	res, err := f.client.Enqueue(t.Context(), f.db, orderArgs{Name: "Needle 100%_off"}, &bunqueue.EnqueueOpts{Queue: f.queue})
	require.NoError(t, err)
	needle := res.ID
	f.fillOrders(t, bunqueue.JobListSearchRows+10)

	status, page := f.get(t, "jobs?queue="+f.queue+"&search="+url.QueryEscape("needle 100%_"))
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, rowIDs(t, page), "the newest range holds filler alone")
	require.Contains(t, page, `value="needle 100%_"`, "the box keeps the text")
	require.Contains(t, page, "No jobs on this page.")
	require.Contains(t, page, "Searched 10,000 jobs; Next searches older ones.")
	require.Contains(t, html.UnescapeString(link(t, page, "clear")), "jobs")
	next := link(t, page, "next")
	require.Contains(t, next, "search=needle+100%25_")
	_, page = f.get(t, next)
	require.Equal(t, []int64{needle}, rowIDs(t, page), "Next searches the older jobs")
	require.NotContains(t, page, `id="searched"`, "the range reached the end")
	require.NotContains(t, page, `id="next"`)
	require.Contains(t, page, `<input type="hidden" name="search" value="needle 100%_">`, "the filter-wide action's filter")
	require.Contains(t, page, "(the first 1,000, among the newest 100,000 jobs the search looks through)")
	for _, tab := range regexp.MustCompile(`<a href="([^"]*)" data-state=`).FindAllStringSubmatch(page, -1) {
		require.Contains(t, html.UnescapeString(tab[1]), "search=needle", "the tabs keep the search")
	}

	_, page = f.get(t, "jobs?queue="+f.queue+"&search=100x")
	require.NotContains(t, page, fmt.Sprintf(`id="job-%d"`, needle), "% is no wildcard")
	// A failed job's error, in either case.
	_, page = f.get(t, "jobs?state=failed&queue="+f.queue+"&search=CANCELLED+WITH")
	require.Equal(t, []int64{f.failed}, rowIDs(t, page))

	status, page = f.get(t, "jobs?search="+url.QueryEscape(strings.Repeat("x", bunqueue.JobListSearchMaxBytes+1)))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "JobListFilter.Search must be at most 200 bytes")

	// Everything the search matches, past the first range: the needle
	// alone is cancelled.
	status, act := f.post(t, url.Values{"action": {"cancel"}, "matching": {"1"}, "queue": {f.queue}, "search": {"NEEDLE"}}, nil)
	require.Equal(t, http.StatusOK, status, "%+v", act)
	require.Len(t, act.Jobs, 1)
	require.Equal(t, needle, act.Jobs[0].ID)
	rec, err := f.client.JobGet(t.Context(), needle)
	require.NoError(t, err)
	require.Equal(t, bunqueue.JobStateFailed, rec.State)
	status, act = f.post(t, url.Values{"action": {"cancel"}, "matching": {"1"}, "queue": {f.queue}, "search": {"a\x00"}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, act.Error, "JobListFilter.Search must not contain a NUL byte")
}
