package browsertest

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
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

// skuItem is a row of the table queue of the queue page's tests: keyed by
// a SKU, not by an id, so that the page shows the table's own key.
type skuItem struct {
	bun.BaseModel `bun:"table:bq_test_dash_sku"`
	SKU           string `bun:"sku,pk"`
	Done          bool
	Error         *string
	FailedAt      *time.Time
}

const hostileRowError = `stock <img src=x onerror="window.pwned=1"></td><script>window.pwned=1</script>`

// tableFixture is a started client with a table queue whose handler
// fails for the rows whose SKU begins with "bad", and whose table holds
// rows that failed for good (done, with an error), and a dashboard of it
// with opts (nil: defaults) and Options.FailedRows reading those,
// mounted under /ops/.
type tableFixture struct {
	db     *bun.DB
	client *bunqueue.Client
	queue  string
	bad    []string // the keys of the failing rows
	dead   []string // the keys of the rows failed for good
	srv    *httptest.Server
}

func setupTable(t *testing.T, opts *dashboard.Options) *tableFixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	dbtest.CreateTable(t, db, "bq_test_dash_sku", "sku VARCHAR(32) PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, error VARCHAR(255) NULL, failed_at DATETIME(6) NULL, INDEX (done, sku)")
	f := &tableFixture{db: db, queue: dbtest.Name("dashsku"), bad: []string{"sku=bad-1", "sku=bad-2"}, dead: []string{"sku=dead-1"}}
	now := time.Now().UTC().Truncate(time.Second)
	msg := hostileRowError
	rows := []skuItem{{SKU: "ok-1"}, {SKU: "bad-1"}, {SKU: "ok-2"}, {SKU: "bad-2"}, {SKU: "dead-1", Done: true, Error: &msg, FailedAt: &now}}
	_, err := db.NewInsert().Model(&rows).Exec(t.Context())
	require.NoError(t, err)

	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Add(bunqueue.NewQueue(f.queue,
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("done = FALSE").Order("sku")
		},
		func(ctx context.Context, tx bun.Tx, it *skuItem) error {
			if strings.HasPrefix(it.SKU, "bad") {
				return errors.New(hostileRowError)
			}
			it.Done = true
			_, err := tx.NewUpdate().Model(it).Column("done").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[skuItem]{Workers: 2})))
	f.client = c
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		for _, fl := range c.RecentFailures() {
			seen[fl.Key] = fl.Queue == f.queue
		}
		return seen[f.bad[0]] && seen[f.bad[1]]
	}, 15*time.Second, 20*time.Millisecond, "the bad rows failed")

	o := dashboard.Options{}
	if opts != nil {
		o = *opts
	}
	o.FailedRows = f.failedRowsOption()
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", dashboard.New(c, &o)))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// failedRows is the app's own query for the rows that failed for good:
// those with an error.
func (f *tableFixture) failedRows(ctx context.Context) ([]dashboard.FailedRow, error) {
	var dead []skuItem
	if err := f.db.NewSelect().Model(&dead).Where("error IS NOT NULL").Order("failed_at DESC").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]dashboard.FailedRow, len(dead))
	for i, d := range dead {
		out[i] = dashboard.FailedRow{Key: "sku=" + d.SKU, Error: *d.Error, FailedAt: *d.FailedAt}
	}
	return out, nil
}

// failedRowsOption is Options.FailedRows of the fixture's queue.
func (f *tableFixture) failedRowsOption() map[string]func(context.Context) ([]dashboard.FailedRow, error) {
	return map[string]func(context.Context) ([]dashboard.FailedRow, error){f.queue: f.failedRows}
}

// retryRow is the app's retry of a row that failed for good: it clears
// its error and puts it back in the queue (done = FALSE), by the key
// failedRows gave it.
func (f *tableFixture) retryRow(ctx context.Context, key string) error {
	sku, ok := strings.CutPrefix(key, "sku=")
	if !ok {
		return fmt.Errorf("not a key of ours: %q", key)
	}
	_, err := f.db.NewUpdate().Model((*skuItem)(nil)).Set("done = FALSE, error = NULL, failed_at = NULL").Where("sku = ?", sku).Exec(ctx)
	return err
}

// rowDone returns whether the row sku is done and has no error.
func (f *tableFixture) rowDone(t *testing.T, sku string) bool {
	t.Helper()
	var row skuItem
	require.NoError(t, f.db.NewSelect().Model(&row).Where("sku = ?", sku).Scan(t.Context()))
	return row.Done && row.Error == nil
}

// getPage returns the status and body of GET target on srv.
func getPage(t *testing.T, srv *httptest.Server, target string) (int, string) {
	t.Helper()
	res, err := http.Get(srv.URL + target)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// section returns the HTML of the section of page with the given id.
func section(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<section id="` + id + `">.*?</section>`).FindString(page)
	require.NotEmpty(t, m, "section %s", id)
	return m
}

// The overview links the table queue to its page; the page shows its
// figures, the rows that failed in this process by their own primary
// key (sku=…), once each, with how often, and the rows the app's
// FailedRows function read; the hostile error shows as text.
func TestQueuePage(t *testing.T) {
	f := setupTable(t, nil)
	status, overview := getPage(t, f.srv, "/ops/")
	require.Equal(t, http.StatusOK, status)
	href := "queue?name=" + url.QueryEscape(f.queue)
	require.Contains(t, overview, `href="`+href+`"`, "the overview links the queue's page")

	status, page := getPage(t, f.srv, "/ops/"+href)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<h2>Queue "+f.queue+"</h2>")
	require.Contains(t, page, `<code>bq_test_dash_sku</code>`)
	require.Regexp(t, `id="processed">2 in the last minute, 2 in the last hour<`, page, "ok-1 and ok-2")
	require.Regexp(t, `id="failed">[1-9][0-9]* in the last minute`, page)

	failing := section(t, page, "failing")
	keys := regexp.MustCompile(`<tr data-key="([^"]*)">`).FindAllStringSubmatch(failing, -1)
	var got []string
	for _, k := range keys {
		got = append(got, html.UnescapeString(k[1]))
	}
	require.ElementsMatch(t, f.bad, got, "each failing row once, by its own key")
	require.Contains(t, failing, html.EscapeString(hostileRowError), "the error, escaped")
	require.Regexp(t, `<td class="num">[1-9][0-9]*</td>`, failing, "times seen")

	dead := section(t, page, "failed-rows")
	require.Contains(t, dead, `<tr data-key="sku=dead-1">`)
	require.Contains(t, dead, html.EscapeString(hostileRowError))
	require.NotContains(t, dead, "failed-rows-cut", "one row: no note")
	for _, s := range []string{failing, dead} {
		require.NotContains(t, s, "<script>", "nothing hostile left unescaped")
		require.NotContains(t, s, "<img")
	}
}

// The queue page has Pause or Resume, as the overview has, behind the
// CSRF token and Authorize; posted without the script, it comes back to
// the queue's page, which says what was done and shows the new state.
func TestQueuePagePauseResume(t *testing.T) {
	f := setupTable(t, &dashboard.Options{AllowActions: true})
	t.Cleanup(func() { _ = f.client.ResumeQueue(context.Background(), f.queue) })
	b := newBrowserClient(t, f.srv.URL)
	page := "queue?name=" + url.QueryEscape(f.queue)
	_, body := b.get(t, page)
	require.Regexp(t, `<span id="state">running</span>`, body)
	require.Contains(t, body, `<form method="post" action="pause" data-action="pause" id="pause-form">`)
	require.Contains(t, body, `<input type="hidden" name="back" value="queue">`)
	token := html.UnescapeString(regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1])

	res := b.post(t, "pause", url.Values{"name": {f.queue}, "back": {"queue"}, "csrf": {token}}, false)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	back := res.Header.Get("Location")
	require.Equal(t, "queue?done=pause&name="+url.QueryEscape(f.queue), back)
	require.True(t, pausedIn(t, f.client, f.queue))
	_, body = b.get(t, back)
	require.Contains(t, body, `<p id="notice" role="status">The queue `+f.queue+` is paused, for every process`)
	require.Contains(t, body, `<span id="state" class="bad">paused</span>`)
	require.Contains(t, body, `action="resume"`)

	res = b.post(t, "resume", url.Values{"name": {f.queue}, "back": {"queue"}, "csrf": {token}}, false)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, body = b.get(t, res.Header.Get("Location"))
	require.Contains(t, body, "The queue "+f.queue+" is resumed, for every process.")
	require.False(t, pausedIn(t, f.client, f.queue))

	// Without actions, or when Authorize refuses the pause: no button.
	for _, opts := range []*dashboard.Options{{}, {AllowActions: true, Authorize: func(_ *http.Request, a string) bool { return a != dashboard.ActionPause }}} {
		rec := httptest.NewRecorder()
		dashboard.New(f.client, opts).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+page, nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.NotContains(t, rec.Body.String(), `id="pause-form"`)
		require.Contains(t, rec.Body.String(), `<span id="state">running</span>`)
	}
}

// pausedIn returns whether Stats says queue is paused.
func pausedIn(t *testing.T, c *bunqueue.Client, queue string) bool {
	t.Helper()
	stats, err := c.Stats(t.Context())
	require.NoError(t, err)
	for _, st := range stats {
		if st.Name == queue {
			return st.Paused
		}
	}
	t.Fatalf("no queue %q in Stats", queue)
	return false
}

// The queue page of a name that is no table queue's answers 404: an
// unknown name, and a jobs queue's, which points to the job browser.
func TestQueuePageUnknown(t *testing.T) {
	f := setupJobs(t, nil)
	require.NoError(t, bunqueue.AddWorker(f.client, bunqueue.WorkerFunc[orderArgs](func(context.Context, bun.IDB, *bunqueue.Job[orderArgs]) error { return nil })))
	status, page := f.get(t, "queue?name=nosuch")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, page, "No table queue of this client has this name.")
	status, page = f.get(t, "queue?name="+f.queue)
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, page, fmt.Sprintf(`href="jobs?queue=%s"`, f.queue))
}

// Options.FailedRows: the page lists the first FailedRowsShown rows and
// says how many there were; an error or a panic of the function is shown
// in their place, naming the queue.
func TestQueuePageFailedRowsLimitAndErrors(t *testing.T) {
	f := setupTable(t, nil)
	many := func(context.Context) ([]dashboard.FailedRow, error) {
		rows := make([]dashboard.FailedRow, dashboard.FailedRowsShown+5)
		for i := range rows {
			rows[i] = dashboard.FailedRow{Key: fmt.Sprintf("sku=n-%d", i), Error: "gone"}
		}
		return rows, nil
	}
	for _, tc := range []struct {
		read func(context.Context) ([]dashboard.FailedRow, error)
		want string
	}{
		{many, fmt.Sprintf("The first %d of %d rows.", dashboard.FailedRowsShown, dashboard.FailedRowsShown+5)},
		{func(context.Context) ([]dashboard.FailedRow, error) { return nil, errors.New("no <b>table</b>") },
			html.EscapeString(fmt.Sprintf("Options.FailedRows[%q]: no <b>table</b>", f.queue))},
		{func(context.Context) ([]dashboard.FailedRow, error) { panic("boom") },
			html.EscapeString(fmt.Sprintf("Options.FailedRows[%q]: panicked: boom", f.queue))},
	} {
		h := dashboard.New(f.client, &dashboard.Options{FailedRows: map[string]func(context.Context) ([]dashboard.FailedRow, error){f.queue: tc.read}})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queue?name="+url.QueryEscape(f.queue), nil))
		require.Equal(t, http.StatusOK, rec.Code)
		dead := section(t, rec.Body.String(), "failed-rows")
		require.Contains(t, dead, tc.want)
		if strings.HasPrefix(tc.want, "The first") {
			require.Equal(t, dashboard.FailedRowsShown, strings.Count(dead, "<tr data-key="))
		}
	}
}
