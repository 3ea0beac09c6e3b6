package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// The queue page in headless Chromium: reached from the overview's link
// on the table queue's name, it lists the failing rows and the rows
// failed for good by their keys, the hostile errors as text, with no
// error in the console; its Pause button pauses the queue and comes back
// to the page, saying so, and Resume undoes it. The screenshots go to
// $BUNQUEUE_SCREENSHOTS.
func TestQueuePageInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupTable(t, &dashboard.Options{AllowActions: true})
	t.Cleanup(func() { _ = f.client.ResumeQueue(context.Background(), f.queue) })
	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/"),
		chromedp.WaitVisible(chromedp.ID("queues")),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-queue=%q] th a`, f.queue))),
		chromedp.WaitVisible(chromedp.ID("failing")),
	))
	keys, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`Array.from(document.querySelectorAll("#failing tbody tr")).map(tr => tr.dataset.key).sort().join(",")`))
	require.NoError(t, err)
	require.Equal(t, f.bad[0]+","+f.bad[1], keys)
	dead, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`Array.from(document.querySelectorAll("#failed-rows tbody tr")).map(tr => tr.dataset.key).join(",")`))
	require.NoError(t, err)
	require.Equal(t, f.dead[0], dead)
	shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#failed-rows td.error-text`)))
	require.NoError(t, err)
	require.Equal(t, hostileRowError, shown, "the error as text")
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1 || document.querySelector("main script, main img") !== null`))
	require.NoError(t, err)
	require.False(t, pwned)
	screenshot(t, ctx, "queue")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pause-button")),
		chromedp.WaitVisible(chromedp.CSS(`#pause-form[data-action="resume"]`)), // the page it came back to
	))
	notice, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("notice")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(notice, "The queue "+f.queue+" is paused, for every process"), notice)
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	require.NoError(t, err)
	require.Equal(t, "paused", state)
	require.True(t, pausedIn(t, f.client, f.queue))
	screenshot(t, ctx, "queue-paused-by-button")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pause-button")),
		chromedp.WaitVisible(chromedp.CSS(`#pause-form[data-action="pause"]`)),
	))
	state, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	require.NoError(t, err)
	require.Equal(t, "running", state)
	require.False(t, pausedIn(t, f.client, f.queue))
	checkConsole()
}
