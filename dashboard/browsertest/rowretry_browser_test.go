package browsertest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// A table's failed row retried from the queue page in headless
// Chromium: its Retry calls the app's Options.RetryRow without leaving
// the page, which says so and drops the row from the rows failed for
// good; the worker then processes the row.
func TestRetryRowInBrowser(t *testing.T) {
	b := openTab(t)
	f := setupTable(t, nil)
	srv := serveOps(t, dashboard.New(f.client, &dashboard.Options{AllowActions: true, RefreshInterval: time.Second,
		FailedRows: f.failedRowsOption(),
		RetryRow:   map[string]func(context.Context, string) error{f.queue: f.retryRow}}))
	b.open(srv.URL+"/ops/queue?name="+url.QueryEscape(f.queue), "#failed-rows")
	require.Equal(t, 1, b.count(`#failed-rows tr[data-key="sku=dead-1"] button.retry`))
	screenshot(t, b.ctx, "queue-retry-row")

	b.do(chromedp.Click(chromedp.CSS(`#failed-rows tr[data-key="sku=dead-1"] button.retry`)), chromedp.WaitVisible(chromedp.ID("notice")))
	require.Equal(t, "Row sku=dead-1 of the queue "+f.queue+" is retried (Options.RetryRow).", b.text("#notice"))
	require.Eventually(t, func() bool { return f.rowDone(t, "dead-1") }, 10*time.Second, 20*time.Millisecond, "the worker processed the row")
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelector('#failed-rows tr[data-key="sku=dead-1"]') === null && document.querySelector("#failed-rows .empty") !== null`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the row left the rows failed for good")
	screenshot(t, b.ctx, "queue-row-retried")
	b.check()
}
