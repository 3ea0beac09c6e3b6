package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// failingArgs is a job whose worker fails for good with its Error.
type failingArgs struct {
	Error string `json:"error"`
}

func (failingArgs) Kind() string { return "dash_failing" }

// failedRun is a client whose jobs queue failed 12 jobs with one error
// and 15 with an error each, in this process, and stopped.
type failedRun struct {
	client *bunqueue.Client
	queue  string
	same   []int64 // the jobs that failed with the same error
}

// sameError is the error of failedRun.same.
const sameError = "smtp: 550 <b>mailbox</b> unavailable"

func runFailures(t *testing.T) *failedRun {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	r := &failedRun{queue: dbtest.Name("dashfail")}
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", r.queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", r.queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond,
		JobQueues: map[string]bunqueue.JobQueueConfig{r.queue: {Workers: 1}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[failingArgs](func(_ context.Context, _ bun.IDB, j *bunqueue.Job[failingArgs]) error {
		return bunqueue.Cancel(errors.New(j.Args.Error))
	})))
	r.client = c
	for i := range 27 {
		msg := sameError
		if i >= 12 {
			msg = fmt.Sprintf("declined #%d", i)
		}
		res, err := c.Enqueue(t.Context(), db, failingArgs{Error: msg}, &bunqueue.EnqueueOpts{Queue: r.queue})
		require.NoError(t, err)
		if msg == sameError {
			r.same = append(r.same, res.ID)
		}
	}
	require.NoError(t, c.Start(t.Context()))
	require.Eventually(t, func() bool { return len(c.RecentFailures()) == 27 }, 20*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	return r
}

// groupRows returns the rows of the recent failures' table of page, as
// the error and count of each.
func groupRows(t *testing.T, page string) []string {
	t.Helper()
	sec := regexp.MustCompile(`(?s)<section id="recent">.*?</section>`).FindString(page)
	require.NotEmpty(t, sec)
	var out []string
	for _, m := range regexp.MustCompile(`(?s)<td class="error-text">(.*?)</td>\s*<td class="num">(\d+)</td>`).FindAllStringSubmatch(sec, -1) {
		out = append(out, html.UnescapeString(m[1])+" ×"+m[2])
	}
	return out
}

// The overview's recent failures come after its failed jobs, grouped by
// queue and error (the group of the latest failure first), ten groups a
// page: a group says how many failures and rows it holds, the first five
// rows linked to their jobs' pages, and how many more; the pages keep
// the failed jobs' filter, and the failed jobs' pages and the refresh
// keep the page of groups.
func TestRecentFailuresGrouped(t *testing.T) {
	t.Parallel()
	r := runFailures(t)
	h := dashboard.New(r.client, nil)
	res, page := get(t, h, "/?queue="+r.queue)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Less(t, strings.Index(page, `<section id="failed">`), strings.Index(page, `<section id="recent">`), "the failed jobs come first")

	latest := r.client.RecentFailures()[0]
	rows := groupRows(t, page)
	require.Len(t, rows, 10, "ten groups a page")
	require.Equal(t, latest.Error+" ×1", rows[0], "the group of the latest failure first")
	require.Contains(t, page, "Groups 1–10 of 16, from the 27 latest failures this process counted.")

	all := append(rows, groupRows(t, mustGet(t, h, "/?queue="+r.queue+"&recent=2"))...)
	require.Len(t, all, 16, "16 groups on two pages")
	require.True(t, endsOne(all, sameError+" ×12"), "one group for the twelve jobs of one error: %q", all)
	for i := 12; i < 27; i++ {
		require.True(t, endsOne(all, fmt.Sprintf("declined #%d ×1", i)), "%q", all)
	}

	// The group of twelve: its first five jobs linked, "and 7 more".
	var group string
	for _, p := range []string{page, mustGet(t, h, "/?recent=2")} {
		for _, row := range regexp.MustCompile(`(?s)<tr data-queue=.*?</tr>`).FindAllString(p, -1) {
			if strings.Contains(row, html.EscapeString(sameError)) {
				group = row
			}
		}
	}
	require.NotEmpty(t, group)
	require.Contains(t, group, fmt.Sprintf(`<a href="jobs?queue=%s">%s</a>`, r.queue, r.queue), "the queue links its jobs")
	links := regexp.MustCompile(`<a href="job\?id=(\d+)"><code>id=(\d+)</code></a>`).FindAllStringSubmatch(group, -1)
	require.Len(t, links, 5)
	for _, l := range links {
		require.Equal(t, l[1], l[2])
		require.Contains(t, fmt.Sprint(r.same), l[1])
	}
	require.Contains(t, group, " and 7 more</td>")
	require.NotContains(t, group, "<b>", "escaped")

	// The pages of groups keep the filter; the failed jobs' pages, the
	// filter's form and the refresh keep the page of groups.
	require.Contains(t, page, fmt.Sprintf(`<a href="./?queue=%s&amp;recent=2" id="recent-older" rel="next">Older</a>`, r.queue))
	require.NotContains(t, page, `id="recent-newer"`)
	second := mustGet(t, h, "/?queue="+r.queue+"&recent=2")
	require.Contains(t, second, fmt.Sprintf(`<a href="./?queue=%s" id="recent-newer" rel="prev">Newer</a>`, r.queue))
	require.Contains(t, second, fmt.Sprintf(`data-query="queue=%s&amp;recent=2"`, r.queue))
	require.Contains(t, second, `<input type="hidden" name="recent" value="2">`)
	require.Len(t, groupRows(t, mustGet(t, h, "/fragment?queue="+r.queue+"&recent=2")), 6)
	require.Len(t, groupRows(t, mustGet(t, h, "/?recent=99")), 6, "past the last page: the last")
	small := dashboard.New(r.client, &dashboard.Options{PageSize: 1})
	older := regexp.MustCompile(`href="([^"]*)" id="older"`).FindStringSubmatch(mustGet(t, small, "/?queue="+r.queue+"&recent=2"))
	require.NotNil(t, older)
	require.Contains(t, html.UnescapeString(older[1]), "recent=2", "the failed jobs' Older keeps the page of groups")
}

// endsOne reports whether one of list ends with suffix (the error's
// words after bunqueue's prefix for a cancelled job).
func endsOne(list []string, suffix string) bool {
	for _, s := range list {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

// mustGet returns the body of GET target, which must answer 200.
func mustGet(t *testing.T, h http.Handler, target string) string {
	t.Helper()
	res, body := get(t, h, target)
	require.Equal(t, http.StatusOK, res.StatusCode, target)
	return body
}
