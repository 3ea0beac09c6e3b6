package browsertest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// state returns the state of f's job id, by JobGet, or "gone" when there
// is no such job.
func (f *jobsFixture) state(t *testing.T, id int64) bunqueue.JobState {
	t.Helper()
	rec, err := f.client.JobGet(t.Context(), id)
	if errors.Is(err, bunqueue.ErrJobNotFound) {
		return "gone"
	}
	require.NoError(t, err)
	return rec.State
}

// scheduled enqueues n jobs due in an hour in f's queue and returns their
// ids, newest first.
func (f *jobsFixture) scheduled(t *testing.T, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		res, err := f.client.Enqueue(t.Context(), f.db, orderArgs{Name: "later"}, &bunqueue.EnqueueOpts{Queue: f.queue, Delay: time.Hour})
		require.NoError(t, err)
		ids = append([]int64{res.ID}, ids...)
	}
	return ids
}

// newJobID returns the job id the answer of a retry gives job id.
func newJobID(t *testing.T, b *tab, id int64) int64 {
	t.Helper()
	m := regexp.MustCompile(`back in its queue as job (\d+)`).FindStringSubmatch(b.text(fmt.Sprintf("#outcome-%d", id)))
	require.NotNil(t, m, "the outcome of job %d says its new id", id)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}

// Each action from the job page, in headless Chromium: Run now, Cancel,
// Retry and Delete each change the job in the database as they say, the
// answer says what was done, and Back shows the job as it is now; a
// Delete the operator does not confirm does nothing.
func TestJobPageActionsInBrowser(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true})
	b := openTab(t)
	jobPage := func(id int64) string { return fmt.Sprintf("%s/ops/job?id=%d", f.srv.URL, id) }

	b.open(jobPage(f.sched), "#job-actions")
	b.submit(`#job-actions button[value=run_now]`, "#summary")
	require.Equal(t, "Done for every job.", b.text("#summary"))
	require.Contains(t, b.text(fmt.Sprintf("#outcome-%d", f.sched)), "due now")
	require.Equal(t, bunqueue.JobStatePending, f.state(t, f.sched))
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("args")))
	require.Contains(t, b.text("main .job-head"), "pending", "Back shows the job as it is now")

	b.open(jobPage(f.pending[0]), "#job-actions")
	b.submit(`#job-actions button[value=cancel]`, "#summary")
	require.Equal(t, "Cancel this job?", b.asked())
	require.Contains(t, b.text(fmt.Sprintf("#outcome-%d", f.pending[0])), "cancelled (it was pending)")
	require.Equal(t, bunqueue.JobStateFailed, f.state(t, f.pending[0]))
	screenshot(t, b.ctx, "action-cancel")

	b.open(jobPage(f.failed), "#job-actions")
	b.submit(`#job-actions button[value=retry]`, "#summary")
	retried := newJobID(t, b, f.failed)
	require.Equal(t, bunqueue.JobStatePending, f.state(t, retried), "the retried job waits in its queue")
	b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf("#outcome-%d a", f.failed))), chromedp.WaitVisible(chromedp.ID("args")))
	require.Contains(t, b.text("h2"), strconv.FormatInt(retried, 10), "the outcome links the new job")

	b.open(jobPage(f.pending[1]), "#job-actions")
	b.do(
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => false`),
		chromedp.Click(chromedp.CSS(`#job-actions button[value=delete]`)),
		chromedp.Sleep(200*time.Millisecond), // a submit would be on its way
	)
	require.Equal(t, 1, b.count("#job-actions"), "still on the job's page")
	require.Equal(t, bunqueue.JobStatePending, f.state(t, f.pending[1]), "not confirmed: not deleted")
	b.submit(`#job-actions button[value=delete]`, "#summary")
	require.Contains(t, b.text(fmt.Sprintf("#outcome-%d", f.pending[1])), "deleted")
	require.Equal(t, bunqueue.JobState("gone"), f.state(t, f.pending[1]))
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("problem")))
	require.Contains(t, b.text("#problem"), "No job with this id")
	b.check()
}

// Each action on a selection made with the job browser's checkboxes, in
// headless Chromium: the ticked jobs, and only those, are run now,
// cancelled, retried and deleted, as the answer and the browser's Back
// page show.
func TestSelectionActionsInBrowser(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true})
	b := openTab(t)
	picked := f.scheduled(t, 3)[:2] // the third stays scheduled
	tab := func(state string) string {
		return fmt.Sprintf("%s/ops/jobs?state=%s&queue=%s", f.srv.URL, state, f.queue)
	}
	act := func(state, action string, ids []int64) {
		t.Helper()
		b.open(tab(state), "#bulk")
		for _, id := range ids {
			b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#job-%d input[name=id]`, id))))
		}
		b.submit(`#bulk button[value=`+action+`]`, "#summary")
		require.Equal(t, "Done for every job.", b.text("#summary"), action)
		require.Equal(t, "true,true", b.attrs("table.outcomes tbody tr", "data-ok"), action)
	}
	states := func(ids []int64) []bunqueue.JobState {
		var out []bunqueue.JobState
		for _, id := range ids {
			out = append(out, f.state(t, id))
		}
		return out
	}

	act("scheduled", "run_now", picked)
	require.Equal(t, []bunqueue.JobState{"pending", "pending"}, states(picked))
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.CSS("table.joblist")))
	require.Equal(t, 2, b.count("table.joblist tbody tr"), "Back: the scheduled tab has the fixture's job and the one not picked")

	act("pending", "cancel", picked)
	require.Equal(t, "Cancel 2 jobs?", b.asked())
	require.Equal(t, []bunqueue.JobState{"failed", "failed"}, states(picked))
	require.Equal(t, bunqueue.JobStatePending, f.state(t, f.pending[0]), "not ticked, not cancelled")

	act("failed", "retry", picked)
	again := []int64{newJobID(t, b, picked[0]), newJobID(t, b, picked[1])}
	require.Equal(t, []bunqueue.JobState{"pending", "pending"}, states(again))
	screenshot(t, b.ctx, "action-retry")

	act("pending", "delete", again)
	require.Equal(t, []bunqueue.JobState{"gone", "gone"}, states(again))
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.CSS("table.joblist")))
	require.Equal(t, fmt.Sprint(f.pending), "["+strings.ReplaceAll(b.attrs("table.joblist tbody tr", "data-id"), ",", " ")+"]",
		"Back: the pending tab lists the three jobs left")
	b.check()
}

// Each action on every job a tab and filter match, in headless Chromium,
// with the "not only the ticked jobs" box: run now, cancel, retry and
// delete reach all the queue's jobs of the tab, as JobList then says,
// and nothing of another tab.
func TestFilterActionsInBrowser(t *testing.T) {
	f := setupJobs(t, &dashboard.Options{AllowActions: true})
	b := openTab(t)
	f.scheduled(t, 2)
	list := func(state bunqueue.JobState) int {
		t.Helper()
		return len(jobIDs(t, f.client, f.queue, state))
	}
	act := func(state, action string, want int) {
		t.Helper()
		b.open(fmt.Sprintf("%s/ops/jobs?state=%s&queue=%s", f.srv.URL, state, f.queue), "#bulk")
		b.do(chromedp.Click(chromedp.ID("matching")))
		b.submit(`#bulk button[value=`+action+`]`, "#summary")
		require.Equal(t, "Done for every job.", b.text("#summary"), action)
		require.Equal(t, want, b.count("table.outcomes tbody tr[data-ok=true]"), action)
	}
	require.Equal(t, 3, list(bunqueue.JobStateScheduled))
	act("scheduled", "run_now", 3)
	require.Zero(t, list(bunqueue.JobStateScheduled))
	require.Equal(t, 6, list(bunqueue.JobStatePending))

	act("pending", "cancel", 6)
	require.Contains(t, b.asked(), "every job the filter matches")
	require.Zero(t, list(bunqueue.JobStatePending))
	require.Equal(t, 7, list(bunqueue.JobStateFailed), "the six and the one failed already")

	act("failed", "retry", 7)
	require.Zero(t, list(bunqueue.JobStateFailed))
	require.Equal(t, 7, list(bunqueue.JobStatePending))

	act("pending", "delete", 7)
	require.Empty(t, jobIDs(t, f.client, f.queue), "the queue's jobs are gone")
	b.do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.CSS("main .empty")))
	require.Equal(t, "No jobs pending.", b.text("main .empty"))
	b.check()
}
