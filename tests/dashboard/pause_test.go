package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// pausedIn returns whether Stats says queue is paused.
func pausedIn(t *testing.T, c *bunqueue.Client, queue string) bool {
	t.Helper()
	stats, err := c.Stats(t.Context())
	require.NoError(t, err)
	for _, st := range stats {
		if st.Name == queue {
			return st.Paused
		}
	}
	t.Fatalf("no queue %q in Stats", queue)
	return false
}

// Each queue has a Pause or Resume button, behind the actions switch and
// the CSRF token like Retry and Delete; it pauses the queue for every
// process, and only the client's own queues.
func TestPauseAndResumeButtons(t *testing.T) {
	t.Parallel()
	f := setup(t, 0)
	t.Cleanup(func() {
		_, _ = f.db.NewRaw("DELETE FROM bunqueue_queues WHERE name = ?", f.queue).Exec(context.Background())
	})
	_, body := get(t, dashboard.New(f.client, nil), "/")
	require.NotContains(t, body, `action="pause"`, "no buttons with actions off")
	res, _ := post(t, dashboard.New(f.client, nil), "/pause", url.Values{"name": {f.queue}}, nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	h := dashboard.New(f.client, &dashboard.Options{AllowActions: true})
	res, body = get(t, h, "/")
	require.Contains(t, body, `action="pause"`)
	cookie, token := csrfOf(t, res, body)
	res, _ = post(t, h, "/pause", url.Values{"name": {f.queue}}, cookie)
	require.Equal(t, http.StatusForbidden, res.StatusCode, "no token")
	require.False(t, pausedIn(t, f.client, f.queue))

	res, body = post(t, h, "/pause", url.Values{"name": {f.queue}, "csrf": {token}}, cookie)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "./?done=pause&name="+f.queue, res.Header.Get("Location"))
	require.True(t, pausedIn(t, f.client, f.queue))
	_, body = get(t, h, "/?done=pause&name="+f.queue)
	require.Contains(t, body, "The queue "+f.queue+" is paused, for every process", "the notice names the queue")
	row := body[strings.Index(body, `data-queue="`+f.queue+`"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, "paused")
	require.Contains(t, row, `action="resume"`)

	res, body = post(t, h, "/resume", url.Values{"name": {f.queue}, "csrf": {token}}, cookie, "Accept", "application/json")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.JSONEq(t, `{"ok": true, "action": "resume", "queue": "`+f.queue+`", "paused": false}`, body)
	require.False(t, pausedIn(t, f.client, f.queue))

	res, body = post(t, h, "/pause", url.Values{"name": {"not-a-queue-of-this-client"}, "csrf": {token}}, cookie)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Contains(t, body, "not one of this client's queues")
}
