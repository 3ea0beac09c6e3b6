package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// Every page in headless Chromium, with two clients: the overview, the
// job browser, job pages, the second client's table queue page, an
// action's answer and the pages of a bad address (404) or parameter
// (400) load with their status and log no console error, no CSP
// violation and no failed request; the queue page refreshes itself,
// showing a pause without a reload. Each page's screenshot goes to
// $BUNQUEUE_SCREENSHOTS, else to the test's temporary directory.
func TestEveryPageInBrowser(t *testing.T) {
	tf := setupTable(t, nil)
	jf := setupJobs(t, nil)
	srv := serveOps(t, dashboard.New(jf.client, &dashboard.Options{
		AllowActions: true, RefreshInterval: time.Second, Title: "Shop queues",
		ClientName: "orders", Clients: []dashboard.Client{{Name: "stock", Client: tf.client}},
		FailedRows: map[string]func(context.Context) ([]dashboard.FailedRow, error){tf.queue: func(context.Context) ([]dashboard.FailedRow, error) {
			return []dashboard.FailedRow{{Key: tf.dead[0], Error: hostileRowError, FailedAt: time.Now()}}, nil
		}},
	}))
	b := openTab(t)
	queuePage := "queue?client=stock&name=" + url.QueryEscape(tf.queue)
	for _, p := range []struct {
		name, path, wait string
		status           int64
	}{
		{"overview", "", "#queues", http.StatusOK},
		{"jobs", "jobs?queue=" + jf.queue, "table.joblist", http.StatusOK},
		{"jobs-other-client", "jobs?client=stock&state=failed&queue=" + jf.queue, "nav.clients", http.StatusOK},
		{"job-failed", fmt.Sprintf("job?id=%d", jf.failed), "#error", http.StatusOK},
		{"queue-page", queuePage, "#failing", http.StatusOK},
		{"not-found", "nosuch", "#problem", http.StatusNotFound},
		{"bad-client", "jobs?client=nobody", "#problem", http.StatusBadRequest},
		{"bad-state", "jobs?state=waiting", "main .error", http.StatusBadRequest},
		{"job-not-found", "job?id=999999999999", "#problem", http.StatusNotFound},
		{"queue-not-found", "queue?name=nosuch", "#problem", http.StatusNotFound},
		{"job", fmt.Sprintf("job?id=%d", jf.sched), "#job-actions", http.StatusOK},
	} {
		require.Equal(t, p.status, b.open(srv.URL+"/ops/"+p.path, p.wait), p.name)
		screenshot(t, b.ctx, p.name)
	}
	b.submit(`#job-actions button[value=run_now]`, "#summary")
	screenshot(t, b.ctx, "action-run-now")

	// The queue page reads its figures again by itself: a pause shows,
	// in the same document.
	b.open(srv.URL+"/ops/"+queuePage, "#failing")
	b.do(chromedp.Evaluate[chromedp.Void](`window.sameDocument = document.getElementById("live-data")`))
	require.Equal(t, "running", b.text("#state"))
	require.NoError(t, tf.client.PauseQueue(t.Context(), tf.queue))
	t.Cleanup(func() { _ = tf.client.ResumeQueue(context.Background(), tf.queue) })
	shown, err := chromedp.Run(b.ctx, chromedp.Poll[bool](
		`document.querySelector("#state").textContent === "paused"`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the queue page shows the pause without a reload")
	require.True(t, shown)
	require.False(t, evalIn[bool](b, `window.sameDocument === document.getElementById("live-data")`), "its live part was replaced")
	require.True(t, evalIn[bool](b, `window.sameDocument !== undefined`), "in the same document")
	require.True(t, strings.HasPrefix(b.text("#status"), "Updated "), b.text("#status"))
	screenshot(t, b.ctx, "queue-page-paused")
	b.check()
}
