package browsertest

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The queue page in headless Chromium: reached from the overview's link
// on the table queue's name, it lists the failing rows and the rows
// failed for good by their keys, the hostile errors as text, with no
// error in the console. The screenshot goes to $BUNQUEUE_SCREENSHOTS.
func TestQueuePageInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupTable(t)
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
	checkConsole()
}
