package dashboard_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// The page's JSON link keeps the page's filter: its href is the query
// string as a browser sends it, not escaped a second time, and following
// it returns the filtered page of failed jobs.
func TestJSONLinkKeepsTheFilter(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	h := dashboard.New(f.client, &dashboard.Options{PageSize: 2})
	page := fmt.Sprintf("/?queue=%s&kind=dash_test&before=%d", f.queue, f.failed[2])
	res, body := get(t, h, page)
	require.Equal(t, http.StatusOK, res.StatusCode)

	m := regexp.MustCompile(`<a href="([^"]*)">JSON</a>`).FindStringSubmatch(body)
	require.NotNil(t, m, "the page has a JSON link")
	href := html.UnescapeString(m[1])
	want := url.Values{"queue": {f.queue}, "kind": {"dash_test"}, "before": {fmt.Sprint(f.failed[2])}}
	require.Equal(t, "data.json?"+want.Encode(), href, "the filter as one query string, escaped once")

	// Followed from the page, as a browser resolves it.
	link, err := url.Parse(page)
	require.NoError(t, err)
	target, err := url.Parse(href)
	require.NoError(t, err)
	res, body = get(t, h, link.ResolveReference(target).String())
	require.Equal(t, http.StatusOK, res.StatusCode)
	var d dashboard.Data
	require.NoError(t, json.Unmarshal([]byte(body), &d), body)
	require.Equal(t, dashboard.Filter{Queue: f.queue, Kind: "dash_test", BeforeID: f.failed[2]}, d.Filter)
	require.Len(t, d.FailedJobs, 2)
	require.Equal(t, []int64{f.failed[1], f.failed[0]}, []int64{d.FailedJobs[0].ID, d.FailedJobs[1].ID}, "the page's failed jobs, below before=")

	// Without a filter the link is plain.
	_, body = get(t, h, "/")
	require.Contains(t, body, `<a href="data.json">JSON</a>`)
}
