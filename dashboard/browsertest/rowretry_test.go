package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// retryRowAnswer posts keys of the fixture's queue to retry-row of srv
// with b's CSRF token, as JSON, and returns the status and answer.
func retryRowAnswer(t *testing.T, b *browserClient, queue string, keys ...string) (int, dashboard.RowActionResult) {
	t.Helper()
	res := b.post(t, "retry-row", url.Values{"name": {queue}, "key": keys}, true)
	var out dashboard.RowActionResult
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// Options.RetryRow: each row the queue's FailedRows lists has a Retry
// button; it calls the app's function with the row's key, which puts it
// back in its queue, where the worker processes it; a key FailedRows
// does not list (made up, or retried already) is a 404 and the app's
// function is not called; its error or panic is a 500 naming it; a
// browser's form comes back to the queue page, which says so.
func TestQueuePageRetryRow(t *testing.T) {
	f := setupTable(t, nil)
	var called []string
	var fail error
	opts := &dashboard.Options{AllowActions: true, FailedRows: f.failedRowsOption(),
		RetryRow: map[string]func(context.Context, string) error{f.queue: func(ctx context.Context, key string) error {
			called = append(called, key)
			if fail != nil {
				return fail
			}
			return f.retryRow(ctx, key)
		}}}
	srv := serveOps(t, dashboard.New(f.client, opts))
	b := newBrowserClient(t, srv.URL)
	page := "queue?name=" + url.QueryEscape(f.queue)
	_, body := b.get(t, page)
	dead := section(t, body, "failed-rows")
	require.Contains(t, dead, `<form method="post" action="retry-row" data-action="retry-row">`)
	require.Contains(t, dead, `<input type="hidden" name="key" value="sku=dead-1">`)
	require.Contains(t, dead, "Retry calls the app's <code>dashboard.Options.RetryRow</code>")
	token := html.UnescapeString(regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1])

	status, res := retryRowAnswer(t, b, f.queue, "sku=ok-1")
	require.Equal(t, http.StatusNotFound, status, "%+v", res)
	require.Equal(t, dashboard.RowActionResult{Action: "retry_row", Queue: f.queue, Rows: []dashboard.RowOutcome{
		{Key: "sku=ok-1", Error: fmt.Sprintf("not among the rows Options.FailedRows[%q] returns (retried already?)", f.queue)}}}, res)
	require.Empty(t, called, "a key FailedRows does not list never reaches the app")

	fail = errors.New("table <b>locked</b>")
	status, res = retryRowAnswer(t, b, f.queue, "sku=dead-1")
	require.Equal(t, http.StatusInternalServerError, status)
	require.Equal(t, fmt.Sprintf("Options.RetryRow[%q]: table <b>locked</b>", f.queue), res.Rows[0].Error)
	fail = nil

	status, res = retryRowAnswer(t, b, f.queue, "sku=dead-1")
	require.Equal(t, http.StatusOK, status, "%+v", res)
	require.Equal(t, dashboard.RowActionResult{OK: true, Action: "retry_row", Queue: f.queue, Rows: []dashboard.RowOutcome{{Key: "sku=dead-1", OK: true}}}, res)
	require.Eventually(t, func() bool { return f.rowDone(t, "dead-1") }, 10*time.Second, 20*time.Millisecond, "the worker processed the row again")
	status, res = retryRowAnswer(t, b, f.queue, "sku=dead-1")
	require.Equal(t, http.StatusNotFound, status, "retried already: %+v", res)
	require.Equal(t, []string{"sku=dead-1", "sku=dead-1"}, called)

	// A browser's form without the script comes back to the queue page.
	_, err := f.db.NewUpdate().Model((*skuItem)(nil)).Set("error = 'again', failed_at = ?", time.Now()).Where("sku = 'dead-1'").Exec(t.Context())
	require.NoError(t, err)
	post := b.post(t, "retry-row", url.Values{"name": {f.queue}, "key": {"sku=dead-1"}, "csrf": {token}}, false)
	require.Equal(t, http.StatusSeeOther, post.StatusCode)
	back := post.Header.Get("Location")
	require.Equal(t, "queue?"+url.Values{"done": {"retry_row"}, "name": {f.queue}, "rows": {"1"}}.Encode(), back)
	_, body = b.get(t, back)
	require.Contains(t, body, `<p id="notice" role="status">The queue `+f.queue+`: 1 row retried (Options.RetryRow).</p>`)

	// Refused: the form's queue is no table queue of the client, no key,
	// no CSRF token; and without the function, no button.
	for _, tc := range []struct {
		form   url.Values
		status int
		want   string
	}{
		{url.Values{"name": {"nosuch"}, "key": {"sku=dead-1"}, "csrf": {token}}, 400, "not one of this client's table queues"},
		{url.Values{"name": {f.queue}, "csrf": {token}}, 400, "no row selected"},
		{url.Values{"name": {f.queue}, "key": {"sku=dead-1"}, "csrf": {""}}, 403, "CSRF token"},
	} {
		res := b.post(t, "retry-row", tc.form, true)
		var out dashboard.RowActionResult
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		require.Equal(t, tc.status, res.StatusCode, "%+v", out)
		require.Contains(t, out.Error, tc.want)
		require.Empty(t, out.Rows)
	}
	for _, o := range []*dashboard.Options{
		{AllowActions: true, FailedRows: f.failedRowsOption()},
		{AllowActions: true, FailedRows: f.failedRowsOption(), RetryRow: opts.RetryRow,
			Authorize: func(_ *http.Request, a string) bool { return a != dashboard.ActionRetryRow }},
		{FailedRows: f.failedRowsOption(), RetryRow: opts.RetryRow},
	} {
		h := dashboard.New(f.client, o)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+page, nil))
		require.NotContains(t, rec.Body.String(), "retry-row", "no button")
		rec = httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/retry-row", strings.NewReader(url.Values{"name": {f.queue}, "key": {"sku=dead-1"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		h.ServeHTTP(rec, req)
		require.Contains(t, []int{400, 403}, rec.Code, rec.Body.String())
	}
	require.Len(t, called, 3, "no refused request reached the app")
}

// Options.RetryRow is checked by New: each queue needs a function and a
// FailedRows function, and the panic names the field.
func TestRetryRowValidated(t *testing.T) {
	f := setupTable(t, nil)
	retry := func(context.Context, string) error { return nil }
	for _, tc := range []struct {
		opts dashboard.Options
		want string
	}{
		{dashboard.Options{RetryRow: map[string]func(context.Context, string) error{f.queue: retry}},
			fmt.Sprintf("dashboard: Options.RetryRow[%q] needs Options.FailedRows[%q]", f.queue, f.queue)},
		{dashboard.Options{FailedRows: f.failedRowsOption(), RetryRow: map[string]func(context.Context, string) error{f.queue: nil}},
			fmt.Sprintf("dashboard: Options.RetryRow[%q] is nil", f.queue)},
	} {
		msg := ""
		func() {
			defer func() { msg = fmt.Sprint(recover()) }()
			dashboard.New(f.client, &tc.opts)
		}()
		require.Contains(t, msg, tc.want)
	}
}
