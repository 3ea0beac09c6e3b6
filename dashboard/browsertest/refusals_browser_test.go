package browsertest

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// The refusals, in headless Chromium: a read-only dashboard shows no
// control of an action on any page; an action Authorize refuses after the
// page was shown answers the refusal page, 403, and does nothing, and the
// page shown again has no button for it; a form whose CSRF token was
// changed is refused and does nothing.
func TestRefusalsInBrowser(t *testing.T) {
	b := openTab(t)
	ro := setupJobs(t, nil)
	for _, page := range []string{"", "jobs?queue=" + ro.queue, fmt.Sprintf("job?id=%d", ro.sched), fmt.Sprintf("job?id=%d", ro.failed)} {
		require.EqualValues(t, http.StatusOK, b.open(ro.srv.URL+"/ops/"+page, "main"), page)
		require.Zero(t, b.count(`form[method=post], button[name=action], input[type=checkbox], input[name=csrf]`), "read-only: no controls on %q", page)
	}
	screenshot(t, b.ctx, "readonly-job")

	var revoked atomic.Bool
	f := setupJobs(t, &dashboard.Options{AllowActions: true, Authorize: func(r *http.Request, action string) bool {
		return action == dashboard.ActionView || !revoked.Load()
	}})
	jobPage := fmt.Sprintf("%s/ops/job?id=%d", f.srv.URL, f.sched)
	b.open(jobPage, "#job-actions")
	revoked.Store(true) // the operator's rights change while the page is open
	b.submit(`#job-actions button[value=run_now]`, "#refused")
	require.Equal(t, "not authorized to run_now: the app's dashboard.Options.Authorize refused it", b.text("#refused"))
	require.Zero(t, b.count("table.outcomes"), "no job acted on")
	require.Equal(t, bunqueue.JobStateScheduled, f.state(t, f.sched), "nothing done")
	screenshot(t, b.ctx, "refused")
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("args")))
	require.Zero(t, b.count("#job-actions button"), "the page shown again hides what Authorize refuses")

	revoked.Store(false)
	b.open(jobPage, "#job-actions")
	b.do(chromedp.SetValue(chromedp.CSS(`#job-actions input[name=csrf]`), "forged.token"))
	b.submit(`#job-actions button[value=run_now]`, "#refused")
	require.Equal(t, "missing or invalid CSRF token: reload the page and try again", b.text("#refused"))
	require.Equal(t, bunqueue.JobStateScheduled, f.state(t, f.sched), "nothing done")
	b.check()
}
