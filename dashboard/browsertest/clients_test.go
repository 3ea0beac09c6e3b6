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
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// jobIDs returns the ids of c's jobs of queue, newest first, by JobList.
func jobIDs(t *testing.T, c *bunqueue.Client, queue string, states ...bunqueue.JobState) []int64 {
	t.Helper()
	page, err := c.JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, States: states, Limit: 100})
	require.NoError(t, err)
	var ids []int64
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// browserClient is an HTTP client with a cookie jar, as a browser has,
// on one dashboard under /ops/, that does not follow redirects.
type browserClient struct {
	base string
	http *http.Client
}

func newBrowserClient(t *testing.T, base string) *browserClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browserClient{base: base + "/ops/", http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get returns the status and body of GET path, below /ops/.
func (b *browserClient) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := b.http.Get(b.base + path)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// token returns the CSRF token of the overview's forms.
func (b *browserClient) token(t *testing.T) string {
	t.Helper()
	_, page := b.get(t, "")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, m, "the overview has forms")
	return html.UnescapeString(m[1])
}

// post posts form to path with the page's CSRF token, asking for JSON
// when asJSON, and returns the answer.
func (b *browserClient) post(t *testing.T, path string, form url.Values, asJSON bool) *http.Response {
	t.Helper()
	if !form.Has("csrf") {
		form.Set("csrf", b.token(t))
	}
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	res, err := b.http.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// jobAction posts form to job-action and returns the status and answer.
func (b *browserClient) jobAction(t *testing.T, form url.Values) (int, dashboard.JobActionResult) {
	t.Helper()
	res := b.post(t, "job-action", form, true)
	var out dashboard.JobActionResult
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// The job browser, the job page and the job actions of the second of two
// clients, each on its own server: client=mail lists, shows and acts on
// mail's jobs, in mail's database, and leaves billing's as they are; the
// links and forms keep the client; a name of no client is a 400 that
// says which there are, and does nothing.
func TestJobPagesOfTwoClients(t *testing.T) {
	t.Parallel()
	f := setupTwoClients(t)
	b := newBrowserClient(t, f.srv.URL)
	idsA, idsB := jobIDs(t, f.a, f.qa), jobIDs(t, f.b, f.qb)
	require.Len(t, idsA, 2)
	require.Len(t, idsB, 3)

	_, overview := b.get(t, "")
	require.Contains(t, queueRow(t, overview, f.qb), `<a href="jobs?queue=`+f.qb+`&amp;client=mail"`, "a jobs queue links its jobs, of its client")
	_, page := b.get(t, "jobs?queue="+f.qa)
	require.Equal(t, idsA, rowIDs(t, page), "billing's, the first client's, by default")
	require.Contains(t, page, `data-client="billing" aria-current="page"`)
	status, page := b.get(t, "jobs?client=mail&queue="+f.qb)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, idsB, rowIDs(t, page), "mail's jobs, from mail's database")
	require.Contains(t, page, `data-client="mail" aria-current="page"`)
	require.Contains(t, page, fmt.Sprintf(`href="job?client=mail&amp;id=%d"`, idsB[0]), "the job links keep the client")
	require.Contains(t, page, `<input type="hidden" name="client" value="mail">`, "the forms keep it")
	require.Contains(t, page, `href="jobs?client=mail&amp;queue=`+f.qb+`&amp;state=pending"`, "the tabs keep it")

	status, page = b.get(t, fmt.Sprintf("job?client=mail&id=%d", idsB[0]))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<td>`+f.qb+`</td>`)
	require.Contains(t, page, fmt.Sprintf(`name="back" value="job?client=mail&amp;id=%d"`, idsB[0]))

	for _, path := range []string{"jobs?client=nobody", "job?id=1&client=nobody", "queue?name=x&client=nobody", "queue-live?name=x&client=nobody"} {
		status, page := b.get(t, path)
		require.Equal(t, http.StatusBadRequest, status, path)
		require.Contains(t, html.UnescapeString(page), `client "nobody" is not one of this dashboard's clients ("billing", "mail")`, path)
	}

	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	status, res := b.jobAction(t, url.Values{"action": {"cancel"}, "id": {id(idsB[0])}, "client": {"nobody"}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, res.Error, `client "nobody" is not one of`)
	require.Equal(t, idsB, jobIDs(t, f.b, f.qb, bunqueue.JobStatePending), "nothing done")

	status, res = b.jobAction(t, url.Values{"action": {"cancel"}, "id": {id(idsB[0])}, "client": {"mail"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	rec, err := f.b.JobGet(t.Context(), idsB[0])
	require.NoError(t, err)
	require.Equal(t, bunqueue.JobStateFailed, rec.State, "cancelled in mail's database")
	status, res = b.jobAction(t, url.Values{"action": {"run_now"}, "matching": {"1"}, "state": {"pending"}, "queue": {f.qb}, "client": {"mail"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.Equal(t, []int64{res.Jobs[0].ID, res.Jobs[1].ID}, idsB[1:], "the filter's jobs are mail's two pending ones")
	status, res = b.jobAction(t, url.Values{"action": {"delete"}, "matching": {"1"}, "state": {"failed"}, "queue": {f.qb}, "client": {"mail"}})
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.Equal(t, idsB[1:], jobIDs(t, f.b, f.qb), "the cancelled job deleted from mail's database")
	require.Equal(t, idsA, jobIDs(t, f.a, f.qa, bunqueue.JobStatePending), "billing's untouched")
}

// Pause and Resume, posted by a page without its script, come back to
// the overview with a notice that names the queue and its client; a
// notice's names come only from queues that exist.
func TestPauseNoticeNamesClient(t *testing.T) {
	t.Parallel()
	f := setupTwoClients(t)
	b := newBrowserClient(t, f.srv.URL)
	res := b.post(t, "pause", url.Values{"name": {f.qb}, "client": {"mail"}}, false)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	back := res.Header.Get("Location")
	require.Equal(t, "./?client=mail&done=pause&name="+f.qb, back)
	require.True(t, paused(t, f.b))
	_, page := b.get(t, strings.TrimPrefix(back, "./"))
	require.Contains(t, page, "The queue "+f.qb+" of client mail is paused, for every process")

	_, page = b.get(t, "?client=billing&done=pause&name="+f.qb)
	require.Contains(t, page, ">The queue is paused", "qb is not billing's: no names")
	_, page = b.get(t, "?client=mail&done=resume&name=%3Cb%3Eforged")
	require.Contains(t, page, ">The queue is resumed")

	res = b.post(t, "resume", url.Values{"name": {f.qb}, "client": {"mail"}}, false)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, page = b.get(t, strings.TrimPrefix(res.Header.Get("Location"), "./"))
	require.Contains(t, page, "The queue "+f.qb+" of client mail is resumed, for every process.")
	require.False(t, paused(t, f.b))
}

// The queue page of a table queue of the second client: client=shop shows
// it, with the rows failing in that client's process, and so does its
// live part; without the client the first client has no such queue.
func TestQueuePageOfSecondClient(t *testing.T) {
	tf := setupTable(t, nil)
	jf := setupJobs(t, nil)
	srv := serveOps(t, dashboard.New(jf.client, &dashboard.Options{Clients: []dashboard.Client{{Name: "shop", Client: tf.client}}}))
	b := newBrowserClient(t, srv.URL)

	_, overview := b.get(t, "")
	href := "queue?name=" + url.QueryEscape(tf.queue) + "&client=shop"
	require.Contains(t, overview, `href="`+html.EscapeString(href)+`"`, "the overview links the queue's page, with its client")
	status, _ := b.get(t, "queue?name="+url.QueryEscape(tf.queue))
	require.Equal(t, http.StatusNotFound, status, "main has no such queue")

	status, page := b.get(t, href)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "queue of client shop")
	require.Contains(t, page, `data-fragment="queue-live?client=shop&amp;name=`+url.QueryEscape(tf.queue)+`"`)
	for _, p := range []string{page, b.mustGet(t, "queue-live?client=shop&name="+url.QueryEscape(tf.queue))} {
		failing := section(t, p, "failing")
		require.Contains(t, failing, `<tr data-key="`+tf.bad[0]+`">`)
		require.Contains(t, failing, `<tr data-key="`+tf.bad[1]+`">`)
	}
	status, _ = b.get(t, "queue-live?name=nosuch")
	require.Equal(t, http.StatusNotFound, status)
}

// mustGet returns the body of GET path, which must answer 200.
func (b *browserClient) mustGet(t *testing.T, path string) string {
	t.Helper()
	status, body := b.get(t, path)
	require.Equal(t, http.StatusOK, status, path)
	return body
}

// A form whose CSRF token is not its cookie's (another browser's, or one
// not signed by the dashboard) is refused, 403, and nothing is done:
// neither a job action nor a pause.
func TestActionsRefuseWrongCSRFToken(t *testing.T) {
	t.Parallel()
	f := setupTwoClients(t)
	mine, theirs := newBrowserClient(t, f.srv.URL), newBrowserClient(t, f.srv.URL)
	other := theirs.token(t)
	require.NotEqual(t, mine.token(t), other)
	ids := jobIDs(t, f.a, f.qa)
	for _, token := range []string{other, "forged.token", ""} {
		status, res := mine.jobAction(t, url.Values{"action": {"cancel"}, "id": {strconv.FormatInt(ids[0], 10)}, "csrf": {token}})
		require.Equal(t, http.StatusForbidden, status, "token %q", token)
		require.Contains(t, res.Error, "missing or invalid CSRF token")
		res2 := mine.post(t, "pause", url.Values{"name": {f.qa}, "csrf": {token}}, false)
		require.Equal(t, http.StatusForbidden, res2.StatusCode)
		body, _ := io.ReadAll(res2.Body)
		require.Contains(t, string(body), "missing or invalid CSRF token")
	}
	require.Equal(t, ids, jobIDs(t, f.a, f.qa, bunqueue.JobStatePending), "nothing cancelled")
	require.False(t, paused(t, f.a), "nothing paused")
}

// serveOps serves h under /ops/ until the test ends.
func serveOps(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
