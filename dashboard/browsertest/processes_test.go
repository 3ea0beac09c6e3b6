package browsertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type procArgs struct{}

func (procArgs) Kind() string { return "browser_proc" }

// twoProcesses starts two clients on pools of their own, as two app
// servers, on tables of their own, and returns a dashboard of the first,
// mounted at the server's root.
func twoProcesses(t *testing.T) *httptest.Server {
	t.Helper()
	admin := dbtest.Open(t, 0)
	tables := bunqueue.Tables{Prefix: dbtest.Name("dashproc") + "_"}
	dbtest.DropTables(t, admin, tables)
	require.NoError(t, tables.Migrate(t.Context(), admin))
	var clients []*bunqueue.Client
	for i, name := range []string{"web-1", "worker-<b>2</b>"} {
		c, err := bunqueue.NewClient(dbtest.Open(t, 0), &bunqueue.Config{Tables: tables, ProcessName: name, HeartbeatInterval: 200 * time.Millisecond,
			JobQueues: map[string]bunqueue.JobQueueConfig{"mail": {Workers: 2 + i, GlobalLimit: 4}}})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[procArgs](func(context.Context, bun.IDB, *bunqueue.Job[procArgs]) error { return nil })))
		require.NoError(t, c.Start(t.Context()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
		clients = append(clients, c)
	}
	require.NoError(t, clients[0].PauseQueue(t.Context(), "mail"))
	require.Eventually(t, func() bool {
		ps, err := clients[0].Processes(t.Context())
		require.NoError(t, err)
		paused := 0
		for _, p := range ps {
			if len(p.Queues) == 1 && p.Queues[0].Paused {
				paused++
			}
		}
		return paused == 2
	}, 20*time.Second, 20*time.Millisecond, "both processes registered, the queue seen paused")
	srv := httptest.NewServer(dashboard.New(clients[0], nil))
	t.Cleanup(srv.Close)
	return srv
}

// The processes page lists every process of the tables, each with its
// queue, workers, limit and pause, marks this process, and escapes the
// names.
func TestProcessesPage(t *testing.T) {
	srv := twoProcesses(t)
	res, err := http.Get(srv.URL + "/processes")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	page := string(body)
	require.Contains(t, page, "2 live, 0 stale")
	require.Contains(t, page, `data-name="web-1"`)
	require.Contains(t, page, "web-1 <span class=\"this\">(this process)</span>")
	require.Contains(t, page, "worker-&lt;b&gt;2&lt;/b&gt;", "escaped")
	require.NotContains(t, page, "<b>2</b>")
	for _, workers := range []int{2, 3} {
		require.Contains(t, page, fmt.Sprintf("jobs, lock: %d workers, 0 in flight, global limit 4", workers))
	}
	require.Equal(t, 2, strings.Count(page, `<span class="paused">paused</span>`))
	require.Contains(t, page, `<a href="processes" aria-current="page">Processes</a>`)
}

// The processes page in headless Chromium, with no console error; a
// screenshot goes to $BUNQUEUE_SCREENSHOTS, when set.
func TestProcessesPageInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	srv := twoProcesses(t)
	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/processes"),
		chromedp.WaitVisible(chromedp.CSS("table.processes")),
	))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.processes tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	screenshot(t, ctx, "processes")
	checkConsole()
}
