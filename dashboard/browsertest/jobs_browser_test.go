package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// The job browser, the job page and the actions, in headless Chromium:
// a filter typed in and a tab clicked list the jobs they select; a job's
// page shows its args as text; Run now on it, and Cancel on a selection
// made with "select all", do what they say and answer with what they did;
// the keyboard reaches the tabs. Screenshots go to $BUNQUEUE_SCREENSHOTS
// (for example /tmp), when set.
func TestJobPagesInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupJobs(t, &dashboard.Options{AllowActions: true, Title: "Shop queues"})
	ctx, checkConsole := startBrowser(t, browser)
	shot := func(name string) { t.Helper(); screenshot(t, ctx, name) }
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	rows := func() string {
		t.Helper()
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			`Array.from(document.querySelectorAll("table.joblist tbody tr")).map(tr => tr.dataset.id).join(",")`))
		require.NoError(t, err)
		return ids
	}

	// From the overview's navigation to the job browser; there the
	// filter, then a tab: the tabs keep the filter.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/"),
		chromedp.WaitVisible(chromedp.ID("queues")),
	))
	shot("overview")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`nav.site a[href=jobs]`)),
		chromedp.WaitVisible(chromedp.CSS("#filter")),
		chromedp.SetValue(chromedp.CSS(`#filter input[name=queue]`), f.queue),
		chromedp.Click(chromedp.CSS(`#filter button`)),
		chromedp.WaitVisible(chromedp.CSS("#clear")),
	))
	require.Equal(t, fmt.Sprintf("%d,%d,%d,%d,%d", f.pending[0], f.pending[1], f.pending[2], f.sched, f.failed), rows(), "the queue's jobs, newest first")
	shot("jobs")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`.tabs a[data-state=scheduled]`)),
		chromedp.WaitVisible(chromedp.CSS(`.tabs a[data-state=scheduled][aria-current=page]`)),
	))
	require.Equal(t, fmt.Sprint(f.sched), rows(), "the scheduled job alone")

	// Keyboard: Tab from the "All" tab reaches the next tab.
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`document.querySelector(".tabs a").focus(); document.activeElement.textContent`))
	require.NoError(t, err)
	require.Equal(t, "All", focused)
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("\t")))
	focused, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.textContent`))
	require.NoError(t, err)
	require.Equal(t, "blocked", focused, "the tabs are in the order of a job's life: blocked first")

	// The job's page, from its link.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#job-%d a`, f.sched))),
		chromedp.WaitVisible(chromedp.ID("args")),
	))
	args := text("#args")
	require.Contains(t, args, `"name": "`+hostileName+`"`, "indented, as text")
	require.Contains(t, text("main .job-head"), "scheduled")
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1 || document.querySelector("main script") !== null`))
	require.NoError(t, err)
	require.False(t, pwned)
	shot("job")

	// Run now, then back to the job: it is pending.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#job-actions button[value=run_now]`)),
		chromedp.WaitVisible(chromedp.ID("summary")),
	))
	require.Equal(t, "Done for every job.", text("#summary"))
	require.Contains(t, text(fmt.Sprintf("#outcome-%d", f.sched)), "due now")
	shot("action")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("back")),
		chromedp.WaitVisible(chromedp.ID("args")),
	))
	require.Contains(t, text("main .job-head"), "pending")

	// Cancel every pending job of the queue: select all, confirm.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/jobs?state=pending&queue="+f.queue),
		chromedp.WaitVisible(chromedp.ID("select-all")),
		chromedp.Evaluate[chromedp.Void](`window.confirm = (q) => { window.asked = q; return true; }`),
		chromedp.Click(chromedp.ID("select-all")),
		chromedp.Click(chromedp.CSS(`#bulk button[value=cancel]`)),
		chromedp.WaitVisible(chromedp.ID("summary")),
	))
	require.Equal(t, "Done for every job.", text("#summary"))
	outcomes, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.outcomes tbody tr[data-ok=true]").length`))
	require.NoError(t, err)
	require.Equal(t, 4, outcomes, "three pending jobs and the one run now")
	for _, id := range append(f.pending, f.sched) {
		rec, err := f.client.JobGet(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateFailed, rec.State, "job %d cancelled", id)
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("back")),
		chromedp.WaitVisible(chromedp.CSS(".empty")),
	))
	require.True(t, strings.HasPrefix(text(".empty"), "No jobs pending"), text(".empty"))
	checkConsole()
}

// The search box in headless Chromium: a text typed in with the queue
// finds nothing in the newest range of filler jobs and says so, Next
// finds the older job whose args hold it; the box keeps the text.
func TestJobSearchInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupJobs(t, &dashboard.Options{AllowActions: true, Title: "Shop queues"})
	res, err := f.client.Enqueue(t.Context(), f.db, orderArgs{Name: "Blue Widget"}, &bunqueue.EnqueueOpts{Queue: f.queue})
	require.NoError(t, err)
	f.fillOrders(t, bunqueue.JobListSearchRows+10)
	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(f.srv.URL+"/ops/jobs"),
		chromedp.WaitVisible(chromedp.ID("search")),
		chromedp.SetValue(chromedp.CSS(`#filter input[name=queue]`), f.queue),
		chromedp.SendKeys(chromedp.ID("search"), "blue WIDGET\r"),
		chromedp.WaitVisible(chromedp.ID("searched")),
	))
	said, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("searched")))
	require.NoError(t, err)
	require.Equal(t, "Searched 10,000 jobs; Next searches older ones.", said)
	screenshot(t, ctx, "jobs-search")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("next")),
		chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("job-%d", res.ID))),
	))
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("search").value`))
	require.NoError(t, err)
	require.Equal(t, "blue WIDGET", kept)
	found, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.joblist tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 1, found, "the job whose args hold the text, alone")
	screenshot(t, ctx, "jobs-search-found")
	checkConsole()
}
