package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The queue page in headless Chromium: reached from the overview's link
// on the table queue's name, it lists the failing rows and the rows
// failed for good by their keys, the hostile errors as text, with no
// error in the console; its Pause button pauses the queue and comes back
// to the page, saying so, and Resume undoes it. The screenshots go to
// $BUNQUEUE_SCREENSHOTS.
func TestQueuePageInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	f := setupTable(t, &dashboard.Options{AllowActions: true})
	t.Cleanup(func() { _ = f.client.ResumeQueue(context.Background(), f.queue) })
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

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pause-button")),
		chromedp.WaitVisible(chromedp.CSS(`#pause-form[data-action="resume"]`)), // the page it came back to
	))
	notice, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("notice")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(notice, "The queue "+f.queue+" is paused, for every process"), notice)
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	require.NoError(t, err)
	require.Equal(t, "paused", state)
	require.True(t, pausedIn(t, f.client, f.queue))
	screenshot(t, ctx, "queue-paused-by-button")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pause-button")),
		chromedp.WaitVisible(chromedp.CSS(`#pause-form[data-action="pause"]`)),
	))
	state, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	require.NoError(t, err)
	require.Equal(t, "running", state)
	require.False(t, pausedIn(t, f.client, f.queue))
	checkConsole()
}

// flakyItem is a row of the table queue of TestQueuePageSucceededLaterInBrowser.
type flakyItem struct {
	bun.BaseModel `bun:"table:bq_test_dash_flaky"`
	SKU           string `bun:"sku,pk"`
	Done          bool
}

// The queue page in headless Chromium marks the failing row that this
// process completed later ("succeeded later, … ago"), and not the one
// that keeps failing. The screenshot goes to $BUNQUEUE_SCREENSHOTS.
func TestQueuePageSucceededLaterInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (install the Debian package chromium, or set BUNQUEUE_CHROMIUM): the browser test does not run")
	}
	db := dbtest.Open(t, 0)
	dbtest.CreateTable(t, db, "bq_test_dash_flaky", "sku VARCHAR(32) PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE")
	rows := []flakyItem{{SKU: "flaky-1"}, {SKU: "bad-1"}}
	_, err := db.NewInsert().Model(&rows).Exec(t.Context())
	require.NoError(t, err)
	queue := dbtest.Name("dashflaky")
	var runs sync.Map
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Add(bunqueue.NewQueue(queue,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("sku") },
		func(ctx context.Context, tx bun.Tx, it *flakyItem) error {
			if _, again := runs.LoadOrStore(it.SKU, true); !again || it.SKU == "bad-1" {
				return errors.New("out of stock")
			}
			it.Done = true
			_, err := tx.NewUpdate().Model(it).Column("done").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[flakyItem]{Cooldown: 20 * time.Millisecond})))
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	require.Eventually(t, func() bool {
		for _, f := range c.RecentFailures() {
			if f.Key == "sku=flaky-1" {
				return !f.SucceededAt.IsZero()
			}
		}
		return false
	}, 15*time.Second, 20*time.Millisecond, "flaky-1 failed, then completed")
	srv := httptest.NewServer(dashboard.New(c, nil))
	t.Cleanup(srv.Close)

	ctx, checkConsole := startBrowser(t, browser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/queue?name="+url.QueryEscape(queue)),
		chromedp.WaitVisible(chromedp.CSS(`#failing tr[data-succeeded]`)),
	))
	marked, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`Array.from(document.querySelectorAll("#failing tbody tr[data-succeeded]")).map(tr => tr.dataset.key).join(",")`))
	require.NoError(t, err)
	require.Equal(t, "sku=flaky-1", marked)
	note, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#failing tr[data-succeeded] .succeeded`)))
	require.NoError(t, err)
	require.Regexp(t, `^succeeded later, \d+s ago$`, note)
	screenshot(t, ctx, "queue-succeeded-later")
	checkConsole()
}
