package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// chartArgs is a job of the charts' test: it fails for good when Fail.
type chartArgs struct {
	Fail bool `json:"fail"`
}

func (chartArgs) Kind() string { return "browser_chart" }

// chartsFixture is a started client with three jobs queues of the
// test's own: one whose jobs completed, one whose jobs failed, and one
// paused from the start, where jobs wait; and a dashboard of it mounted
// under /ops/.
type chartsFixture struct {
	client    *bunqueue.Client
	good, bad string // the queues whose jobs ran
	idle      string // the paused queue
	processed int    // the jobs run in good
	failed    int    // the jobs failed in bad
	waiting   int    // the jobs waiting in idle
	srv       *httptest.Server
}

func setupCharts(t *testing.T) *chartsFixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	f := &chartsFixture{good: dbtest.Name("chartok"), bad: dbtest.Name("chartbad"), processed: 5, failed: 2, waiting: 3, idle: dbtest.Name("chartidle")}
	t.Cleanup(func() {
		for _, q := range []string{f.good, f.bad, f.idle} {
			_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", q)
			_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", q)
		}
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		JobQueues: map[string]bunqueue.JobQueueConfig{f.good: {Workers: 2, GlobalLimit: 2, RateLimit: bunqueue.Rate{N: 100, Per: time.Second}}, f.bad: {Workers: 1}, f.idle: {Workers: 1}}})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[chartArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[chartArgs]) error {
		if job.Args.Fail {
			return bunqueue.Cancel(errors.New("chart: <b>refused</b>"))
		}
		return nil
	})))
	f.client = c
	enqueue := func(queue string, args chartArgs, delay time.Duration, n int) {
		for range n {
			_, err := c.Enqueue(t.Context(), db, args, &bunqueue.EnqueueOpts{Queue: queue, Delay: delay})
			require.NoError(t, err)
		}
	}
	enqueue(f.good, chartArgs{}, 0, f.processed)
	enqueue(f.bad, chartArgs{Fail: true}, 0, f.failed)
	enqueue(f.idle, chartArgs{}, 0, f.waiting)
	require.NoError(t, c.PauseQueue(t.Context(), f.idle)) // from the start: its jobs wait
	t.Cleanup(func() { _ = c.ResumeQueue(context.Background(), f.idle) })
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	require.Eventually(t, func() bool {
		stats, err := c.Stats(t.Context())
		if err != nil {
			return false
		}
		var done, failed int64
		for _, st := range stats {
			done += st.ProcessedLastHour
			failed += st.FailedLastHour
		}
		return done == int64(f.processed) && failed == int64(f.failed)
	}, 15*time.Second, 20*time.Millisecond, "the jobs ran")
	require.Eventually(t, func() bool { // and their heartbeats added them to the fleet's history
		var done, failed int64
		for _, q := range []string{f.good, f.bad} {
			h, err := c.FleetHistory(t.Context(), q)
			if err != nil {
				return false
			}
			for _, p := range h.Minutes {
				done, failed = done+p.Processed, failed+p.Failed
			}
		}
		return done == int64(f.processed) && failed == int64(f.failed)
	}, 15*time.Second, 20*time.Millisecond, "the fleet's history has the jobs")
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", dashboard.New(c, &dashboard.Options{RefreshInterval: time.Second})))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// The overview, and the fragment its refresh fetches, draw four charts
// per jobs queue from the queue's last hour, the fourth of the waits
// before start; data.json has the same history, whose minutes add up to
// the hour's figures.
func TestOverviewCharts(t *testing.T) {
	t.Parallel()
	f := setupCharts(t)
	get := func(path string) string {
		t.Helper()
		res, err := http.Get(f.srv.URL + "/ops/" + path)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return string(b)
	}
	for _, path := range []string{"", "fragment"} {
		page := get(path)
		for _, q := range []string{f.good, f.bad} {
			block := chartsOf(t, page, q)
			require.Equal(t, 4, strings.Count(block, "<svg "), "four charts of %s on %q", q, path)
			for _, class := range []string{"chart-processed", "chart-failed", "chart-depth", "chart-wait"} {
				require.Contains(t, block, class)
			}
		}
		good, bad := chartsOf(t, page, f.good), chartsOf(t, page, f.bad)
		require.Equal(t, int64(f.processed), tipsSum(t, chartOf(t, good, "processed"), "processed"), "the good queue's jobs, minute by minute")
		require.Equal(t, int64(f.failed), tipsSum(t, chartOf(t, bad, "failed"), "failed"))
		require.Equal(t, 0, strings.Count(chartOf(t, good, "failed"), `class="bar"`), "no failure in the good queue")
		require.Equal(t, 0, strings.Count(chartOf(t, bad, "processed"), `class="bar"`))
		require.NotZero(t, strings.Count(chartOf(t, bad, "failed"), `class="bar"`), "the bad queue's failures")
		require.Contains(t, chartOf(t, bad, "depth"), `<path class="line"`, "the depth read with the page")
		require.Contains(t, chartOf(t, chartsOf(t, page, f.idle), "depth"), fmt.Sprintf("max %d · now %d", f.waiting, f.waiting), "the jobs waiting in the paused queue")
		wait := chartOf(t, good, "wait")
		require.Equal(t, int64(f.processed), tipsSum(t, wait, "started, waited p50 [^<]*"), "the good queue's starts, minute by minute")
		require.NotZero(t, strings.Count(wait, `class="bar inner"`), "the waits' medians")
		require.Contains(t, chartOf(t, chartsOf(t, page, f.idle), "wait"), ">no job started</text>", "the paused queue started none")
	}

	var d dashboard.Data
	require.NoError(t, json.Unmarshal([]byte(get("data.json")), &d))
	require.Len(t, d.History, len(d.Queues))
	for i, st := range d.Queues {
		h := d.History[i]
		require.Equal(t, st.Name, h.Queue)
		require.Len(t, h.Processed, bunqueue.HistoryMinutes)
		require.Len(t, h.Depth, bunqueue.HistoryMinutes)
		var p, fl int64
		for j := range h.Processed {
			p, fl = p+h.Processed[j], fl+h.Failed[j]
		}
		require.Equal(t, [2]int64{st.ProcessedLastHour, st.FailedLastHour}, [2]int64{p, fl}, st.Name)
		var started int64
		for j, n := range h.Started {
			started += n
			require.LessOrEqual(t, h.WaitP50[j], h.WaitMax[j], st.Name)
		}
		require.Equal(t, st.ProcessedLastHour+st.FailedLastHour, started, "%s: each job started once, and completed or failed", st.Name)
		require.Equal(t, bunqueue.QueueKindJobs, h.Kind)
		require.Equal(t, st.Depth, h.Depth[len(h.Depth)-1], "this minute's depth is the one just read")
		require.Equal(t, -1, h.Depth[0], "no page was open an hour ago")
	}
}

// chartsOf returns the charts of queue on page.
func chartsOf(t *testing.T, page, queue string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<div class="queue-charts" data-queue="` + regexp.QuoteMeta(queue) + `">.*?</div>\s*(?:<div class="queue-charts"|</section>)`).FindString(page)
	require.NotEmpty(t, m, "the charts of %s", queue)
	return m
}

// chartOf returns the chart of class ("processed", …) of a queue's charts.
func chartOf(t *testing.T, charts, class string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<figure class="chart chart-` + class + `">.*?</figure>`).FindString(charts)
	require.NotEmpty(t, m, class)
	return m
}

// tipsSum adds up the counts of the minutes' tooltips of a chart, such as
// "16:01 UTC: 2 processed".
func tipsSum(t *testing.T, chart, noun string) int64 {
	t.Helper()
	var n int64
	for _, m := range regexp.MustCompile(`<title>\d\d:\d\d UTC: (\d+) `+noun+`</title>`).FindAllStringSubmatch(chart, -1) {
		v, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		n += v
	}
	return n
}
