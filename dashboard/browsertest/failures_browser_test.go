package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// declineArgs is a job whose worker fails for good with its Error.
type declineArgs struct {
	Error string `json:"error"`
}

func (declineArgs) Kind() string { return "browser_decline" }

// The overview's recent failures in headless Chromium, with 27 failures:
// 12 of one error and 15 of an error each. They come after the failed
// jobs, ten groups a page, the group of twelve as one row with its
// first five jobs linked and "and 7 more"; Older shows the second page
// and keeps it through the page's refreshes; a job's link opens its page.
func TestRecentFailuresInBrowser(t *testing.T) {
	b := openTab(t)
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("decline")
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[declineArgs](func(_ context.Context, _ bun.IDB, j *bunqueue.Job[declineArgs]) error {
		return bunqueue.Cancel(errors.New(j.Args.Error))
	})))
	for i := range 27 {
		msg := "card declined: insufficient funds"
		if i >= 12 {
			msg = fmt.Sprintf("address <b>%d</b> rejected", i)
		}
		_, err := c.Enqueue(t.Context(), db, declineArgs{Error: msg}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	require.Eventually(t, func() bool { return len(c.RecentFailures()) == 27 }, 20*time.Second, 20*time.Millisecond)
	srv := serveOps(t, dashboard.New(c, &dashboard.Options{AllowActions: true, RefreshInterval: time.Second, PageSize: 3}))

	b.open(srv.URL+"/ops/?queue="+url.QueryEscape(queue), "#recent")
	require.True(t, evalIn[bool](b, `document.getElementById("failed").compareDocumentPosition(document.getElementById("recent")) === Node.DOCUMENT_POSITION_FOLLOWING`),
		"the failed jobs come first")
	require.Equal(t, 10, b.count("#recent tbody tr"))
	require.Equal(t, "Groups 1–10 of 16, from the 27 latest failures this process counted.", b.text("#recent-range"))
	screenshot(t, b.ctx, "recent-failures")

	b.do(chromedp.Click(chromedp.ID("recent-older")), chromedp.WaitVisible(chromedp.ID("recent-newer")))
	require.Equal(t, 6, b.count("#recent tbody tr"))
	require.Equal(t, "Groups 11–16 of 16, from the 27 latest failures this process counted.", b.text("#recent-range"))
	group := evalIn[string](b, `Array.from(document.querySelectorAll("#recent tbody tr")).map(tr => tr.textContent).find(s => s.includes("card declined")) || ""`)
	require.Contains(t, group, "12", "twelve failures in one group")
	require.Contains(t, group, " and 7 more")
	require.Equal(t, 5, evalIn[int](b, `Array.from(document.querySelectorAll("#recent tbody tr")).find(tr => tr.textContent.includes("card declined")).querySelectorAll('a[href^="job?id="]').length`),
		"the group's first five jobs linked")
	require.Equal(t, 0, b.count("#recent b"), "the errors as text")

	// The refresh keeps the second page.
	b.do(chromedp.Evaluate[chromedp.Void](`window.before = document.getElementById("live-data")`))
	_, err = chromedp.Run(b.ctx, chromedp.Poll[bool](`window.before !== document.getElementById("live-data")`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the page refreshed")
	require.Equal(t, 6, b.count("#recent tbody tr"), "still the second page")
	screenshot(t, b.ctx, "recent-failures-older")

	b.do(chromedp.Evaluate[chromedp.Void](`Array.from(document.querySelectorAll("#recent tbody tr")).find(tr => tr.textContent.includes("card declined")).querySelector('a[href^="job?id="]').click()`),
		chromedp.WaitVisible(chromedp.ID("error")))
	require.True(t, strings.HasSuffix(b.text("#error"), "card declined: insufficient funds"), b.text("#error"))
	b.check()
}
