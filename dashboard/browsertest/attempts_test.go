package browsertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type flakyArgs struct{}

func (flakyArgs) Kind() string { return "browser_flaky" }

// failedTwice runs a job of two attempts, each of which fails with an
// error that would be markup if the page did not escape it, and returns
// the job's id and a dashboard of its client, mounted at the server's
// root.
func failedTwice(t *testing.T) (int64, *httptest.Server) {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("dashattempts")
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond,
		Backoff:   func(int) time.Duration { return 20 * time.Millisecond },
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[flakyArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[flakyArgs]) error {
		return fmt.Errorf("<b>gateway said no</b> on attempt %d", job.Attempt)
	})))
	res, err := c.Enqueue(t.Context(), db, flakyArgs{}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	require.Eventually(t, func() bool {
		rec, err := c.JobGet(t.Context(), res.ID)
		require.NoError(t, err)
		return rec.State == bunqueue.JobStateFailed
	}, 20*time.Second, 20*time.Millisecond, "the job uses its two attempts")
	srv := httptest.NewServer(dashboard.New(c, nil))
	t.Cleanup(srv.Close)
	return res.ID, srv
}

// The job page lists a job's failed attempts, oldest first: number, time
// and error, escaped.
func TestJobPageAttempts(t *testing.T) {
	id, srv := failedTwice(t)
	res, err := http.Get(fmt.Sprintf("%s/job?id=%d", srv.URL, id))
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	page := string(body)
	require.Contains(t, page, `<table class="attempts" id="attempts">`)
	rows := regexp.MustCompile(`<tr><td class="num">(\d+)</td><td><time datetime="([^"]+)">([^<]+) UTC</time></td><td><pre class="error-text">([^<]*)</pre>`).
		FindAllStringSubmatch(page, -1)
	require.Len(t, rows, 2, page)
	for i, r := range rows {
		require.Equal(t, fmt.Sprint(i+1), r[1])
		at, err := time.Parse(time.RFC3339Nano, r[2])
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Hour, "by the database clock")
		require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$`, r[3])
		require.Equal(t, fmt.Sprintf("&lt;b&gt;gateway said no&lt;/b&gt; on attempt %d", i+1), r[4])
	}
	require.NotContains(t, page, "<b>gateway", "escaped")
	require.NotContains(t, page, "Only the newest", "two attempts are all of them")
}

// The job page's attempts in headless Chromium, with no console error; a
// screenshot goes to $BUNQUEUE_SCREENSHOTS, when set.
func TestJobPageAttemptsInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	id, srv := failedTwice(t)
	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/job?id=%d", srv.URL, id)),
		chromedp.WaitVisible(chromedp.ID("attempts")),
	))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#attempts tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	screenshot(t, ctx, "job-attempts")
	checkConsole()
}
