package browsertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The overview of two clients in headless Chromium: both queues, each
// with its client's name and limits; the Pause button of the second
// client's queue pauses it in that client's database and the page comes
// back saying so, naming the queue and the client, and Resume resumes
// it, with no console error. A screenshot goes to
// $BUNQUEUE_SCREENSHOTS, when set.
func TestTwoClientsInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupTwoClients(t)
	ctx, checkConsole := startBrowser(t, browser)
	row := func(q string) string { return fmt.Sprintf(`#queues tr[data-queue=%q]`, q) }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/"),
		chromedp.WaitVisible(chromedp.CSS(row(f.qb))),
	))
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).textContent`, sel)))
		require.NoError(t, err, sel)
		return s
	}
	require.Equal(t, "billing", text(row(f.qa)+" td.client"))
	require.Equal(t, "mail", text(row(f.qb)+" td.client"))
	require.Equal(t, "2 at once; 3 per minute per limit key", text(row(f.qb)+" td.limits"))
	screenshot(t, ctx, "clients")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(row(f.qb)+` form[data-action="pause"] button`)),
		chromedp.WaitVisible(chromedp.CSS(row(f.qb)+` form[data-action="resume"]`)),
	))
	require.Contains(t, text("#notice"), "The queue "+f.qb+" of client mail is paused")
	screenshot(t, ctx, "clients-paused")
	require.True(t, paused(t, f.b), "the second client's queue is paused")
	require.False(t, paused(t, f.a))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(row(f.qb)+` form[data-action="resume"] button`)),
		chromedp.WaitVisible(chromedp.CSS(row(f.qb)+` form[data-action="pause"]`)),
	))
	require.Eventually(t, func() bool { return !paused(t, f.b) }, 5*time.Second, 50*time.Millisecond)
	require.Contains(t, text("#notice"), "The queue "+f.qb+" of client mail is resumed")
	checkConsole()
}
