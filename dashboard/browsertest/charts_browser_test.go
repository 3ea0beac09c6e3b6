package browsertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The overview's charts in headless Chromium: four per jobs queue, drawn
// (their bars have a size on the page), with their tooltips, drawn again
// by the page's own refresh, with no console error or CSP violation. A
// screenshot goes to $BUNQUEUE_SCREENSHOTS, when set.
func TestChartsInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupCharts(t)
	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/"),
		chromedp.WaitVisible(chromedp.CSS("#history svg")),
		chromedp.Evaluate[chromedp.Void](`window.firstLive = document.getElementById("live-data")`),
	))
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		require.NoError(t, err, sel)
		return n
	}
	for _, q := range []string{f.good, f.bad} {
		require.Equal(t, 4, count(fmt.Sprintf(`#history .queue-charts[data-queue=%q] svg`, q)), q)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(
		`Array.from(document.querySelectorAll('.queue-charts[data-queue=%q] .chart-processed rect.bar')).reduce((h, r) => h + r.getBBox().height, 0)`, f.good)))
	require.NoError(t, err)
	require.Greater(t, drawn, 0.0, "the processed bars have a height on the page")
	tip, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`document.querySelector('.queue-charts[data-queue=%q] .chart-failed svg > title').textContent`, f.bad)))
	require.NoError(t, err)
	require.Contains(t, tip, "Failed per minute over the last hour: at most")
	waits, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(
		`Array.from(document.querySelectorAll('.queue-charts[data-queue=%q] .chart-wait rect.bar')).reduce((h, r) => h + r.getBBox().height, 0)`, f.good)))
	require.NoError(t, err)
	require.Greater(t, waits, 0.0, "the waits' bars have a height on the page")

	// The refresh puts new charts in place, in the same document.
	fresh, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.getElementById("live-data") !== window.firstLive && document.querySelectorAll("#history svg").length > 0`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the page refreshes its charts")
	require.True(t, fresh)
	require.Equal(t, 4, count(fmt.Sprintf(`#history .queue-charts[data-queue=%q] svg`, f.good)))

	heading, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#history h2").textContent`))
	require.NoError(t, err)
	require.Contains(t, heading, "of the whole fleet", "the fleet's history by default")
	screenshot(t, ctx, "charts")

	// "this process": the same charts from this process's counts, kept
	// by the refresh; and back.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("scope-toggle")),
		chromedp.WaitVisible(chromedp.CSS("#history svg"))))
	proc, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`location.search.includes("scope=process") && document.querySelector("#history h2").textContent.includes("in this process")`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err)
	require.True(t, proc, "the process's history")
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.procLive = document.getElementById("live-data")`)))
	kept, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.getElementById("live-data") !== window.procLive && document.querySelector("#history h2").textContent.includes("in this process")`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the refresh keeps the scope")
	require.True(t, kept)
	drawn, err = chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(
		`Array.from(document.querySelectorAll('.queue-charts[data-queue=%q] .chart-processed rect.bar')).reduce((h, r) => h + r.getBBox().height, 0)`, f.good)))
	require.NoError(t, err)
	require.Greater(t, drawn, 0.0, "this process's processed bars")
	screenshot(t, ctx, "charts-process")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("scope-toggle")), chromedp.Sleep(300*time.Millisecond),
		chromedp.WaitVisible(chromedp.CSS("#history svg"))))
	back, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`!location.search.includes("scope") && document.querySelector("#history h2").textContent.includes("of the whole fleet")`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err)
	require.True(t, back, "back to the fleet")
	checkConsole()
}
