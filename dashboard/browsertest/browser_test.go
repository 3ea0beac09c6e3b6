package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// chromium returns the browser to run: $BUNQUEUE_CHROMIUM, else the
// first of the usual names found on the PATH, else "".
func chromium() string {
	if p := os.Getenv("BUNQUEUE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// signupArgs is the example's job: a welcome email, whose sender is
// broken until fixed is set.
type signupArgs struct {
	Name string `json:"name"`
}

func (signupArgs) Kind() string { return "browser_welcome" }

// The dashboard of a running client, in headless Chromium: a failed job
// is listed with its hostile payload shown as text, Retry puts it back
// (the job then runs and succeeds) and it leaves the failed list, and the
// page refreshes its figures by itself, without a reload.
func TestDashboardInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM to a Chrome or Chromium binary): the dashboard's browser test does not run")
	}
	began := time.Now()
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("browser")
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})

	// The example app: one jobs queue, a worker that fails for good until
	// it is fixed.
	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 100 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}},
	})
	require.NoError(t, err)
	var fixed atomic.Bool
	require.NoError(t, bunqueue.AddWorker(client, bunqueue.WorkerFunc[signupArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[signupArgs]) error {
		if !fixed.Load() {
			return bunqueue.Cancel(errors.New(`smtp: 550 <img src=x onerror="window.pwned=1"> rejected`))
		}
		return nil
	})))
	require.NoError(t, client.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", http.StripPrefix("/bunqueue", dashboard.New(client, &dashboard.Options{
		AllowActions: true, RefreshInterval: time.Second,
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	payload := `{"name":"<script>window.pwned=1</script>"}`
	_, err = client.Enqueue(t.Context(), db, signupArgs{Name: "<script>window.pwned=1</script>"}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	var failedID int64
	require.Eventually(t, func() bool {
		err := db.NewRaw("SELECT id FROM bunqueue_failed_jobs WHERE queue = ?", queue).Scan(t.Context(), &failedID)
		return err == nil && failedID > 0
	}, 10*time.Second, 20*time.Millisecond, "the job fails for good")
	// Go's JSON encoder escapes < and >; a payload written by other means
	// need not, and the failed jobs keep its bytes as they are.
	_, err = db.NewRaw("UPDATE bunqueue_failed_jobs SET args = ? WHERE id = ?", []byte(payload), failedID).Exec(t.Context())
	require.NoError(t, err)

	ctx, checkConsole := startBrowser(t, browser)
	row := fmt.Sprintf("#failed-%d", failedID)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/bunqueue/?queue="+queue),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Evaluate[chromedp.Void](`window.sameDocument = true`),
	))
	head, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+" .job-error")))
	require.NoError(t, err)
	require.Contains(t, head, `<img src=x onerror="window.pwned=1"> rejected`, "the error, as text")
	shown, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(row+" .payload")))
	require.NoError(t, err)
	require.Equal(t, payload, shown, "the payload, as text")
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1 || document.querySelector("#live img, #live script") !== null`))
	require.NoError(t, err)
	require.False(t, pwned, "nothing in the payload or the error ran or became an element")

	// The page's JSON link keeps its filter: followed, it returns the
	// same failed job.
	listed, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`fetch(document.querySelector("footer a").href).then(r => r.json()).then(d => d.filter.queue + " " + d.failed_jobs.map(j => j.id).join(","))`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s %d", queue, failedID), listed, "data.json, from the page's link")

	// Fix the worker, then Retry from the page.
	fixed.Store(true)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(row+" button.retry")),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.ID("notice")),
	))
	notice, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("notice")))
	require.NoError(t, err)
	require.Contains(t, notice, fmt.Sprintf("Failed job %d is back in its queue as job", failedID))
	var left int
	require.NoError(t, db.NewRaw("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", failedID).Scan(t.Context(), &left))
	require.Zero(t, left, "the failed job is gone from the table too")

	// The retried job runs and completes; the page's own refresh shows it
	// in the queue's figures, in the same document.
	processed := fmt.Sprintf(`tr[data-queue=%q] td:nth-of-type(4)`, queue)
	done, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(
		`(() => { const td = document.querySelector(%q); return td !== null && td.textContent.trim() === "1"; })()`, processed),
		chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the queue's processed count reaches 1 without a reload")
	require.True(t, done)
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.sameDocument === true`))
	require.NoError(t, err)
	require.True(t, same, "refreshed without a reload")
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(status, "Updated "), status)

	checkConsole()
	t.Logf("browser test took %s", time.Since(began).Round(time.Millisecond))
}

// startBrowser starts browser, headless, for 60 seconds at most, and
// returns its tab and a function that fails the test if the pages have
// logged a script error, any other error or a Content-Security-Policy
// violation so far, or if a request failed: one the browser could not
// make, or answered 400 or more, except a page's own address (a 404 or
// 403 page, whose status the test checks itself).
func startBrowser(t *testing.T, browser string) (context.Context, func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1200, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", browser, err)
	}
	w := &pageWatch{pages: map[string]bool{}, origins: map[string]bool{}}
	w.watch(ctx)
	return ctx, func() {
		t.Helper()
		w.check(t)
	}
}

// pageWatch collects what the pages of a tab logged, the origins they
// loaded from, and the requests that failed.
type pageWatch struct {
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	failed  []string        // the requests that failed, with why
	pages   map[string]bool // the addresses of the pages answered 400 or more
	origins map[string]bool // scheme://host of every response over the network
}

// watch collects the console messages and the failed requests of ctx's
// tab, until it ends.
func (w *pageWatch) watch(ctx context.Context) {
	messages := chromedp.Console(ctx)
	responses := chromedp.Events(ctx, network.ResponseReceived)
	failures := chromedp.Events(ctx, network.LoadingFailed)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			w.mu.Lock()
			w.console = append(w.console, m)
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range responses {
			if err != nil {
				return
			}
			if u, err := url.Parse(ev.Response.URL); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
				w.mu.Lock()
				w.origins[u.Scheme+"://"+u.Host] = true
				w.mu.Unlock()
			}
			if ev.Response.Status < 400 {
				continue
			}
			w.mu.Lock()
			if ev.Type == network.ResourceTypeDocument {
				w.pages[ev.Response.URL] = true
			} else {
				w.failed = append(w.failed, fmt.Sprintf("%s %s: %d", ev.Type, ev.Response.URL, ev.Response.Status))
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range failures {
			if err != nil {
				return
			}
			if ev.Canceled { // a fetch that a navigation ended
				continue
			}
			w.mu.Lock()
			w.failed = append(w.failed, fmt.Sprintf("%s request %s: %s %s", ev.Type, ev.RequestID, ev.ErrorText, ev.BlockedReason))
			w.mu.Unlock()
		}
	}()
}

// check fails t if the tab logged an error, a request failed, or a page
// loaded anything from another server than the test's own.
func (w *pageWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.failed, "no failed request")
	require.NotEmpty(t, w.origins, "the tab loaded its pages over the network")
	for origin := range w.origins {
		require.True(t, strings.HasPrefix(origin, "http://127.0.0.1:"), "no request to another server than the test's: %s", origin)
	}
	for _, m := range w.console {
		if m.Source == "network" && w.pages[m.URL] {
			continue // the status of a page the test asked for
		}
		require.False(t, m.IsException(), "no script error: %s", m)
		require.NotEqual(t, chromedp.ConsoleError, m.Type, "no error in the console: %s (%s)", m, m.URL)
		require.NotContains(t, strings.ToLower(m.String()), "content security policy", "no CSP violation: %s", m)
	}
}

// screenshot saves the whole page of ctx's tab as dash-name.png in
// $BUNQUEUE_SCREENSHOTS, when that variable is set, else in the test's
// temporary directory, and returns its path.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	dir := os.Getenv("BUNQUEUE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(dir, "dash-"+name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	return path
}
