package browsertest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The job browser has a tab of the blocked jobs: a workflow's job that
// waits for its dependency is listed there, and not under pending.
func TestJobBrowserBlockedTab(t *testing.T) {
	db := dbtest.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	queue := dbtest.Name("dashblocked")
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_job_deps WHERE job_id IN (SELECT id FROM bunqueue_jobs WHERE queue = ?)", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	require.NoError(t, err)
	opts := &bunqueue.EnqueueOpts{Queue: queue}
	ids, err := c.EnqueueWorkflow(t.Context(), db, []bunqueue.WorkflowJob{
		{Name: "first", Args: procArgs{}, Opts: opts},
		{Name: "then", Args: procArgs{}, Opts: opts, DependsOn: bunqueue.After("first")},
	}, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(dashboard.New(c, nil))
	t.Cleanup(srv.Close)

	get := func(state string) []int64 {
		res, err := http.Get(srv.URL + "/jobs?state=" + state + "&queue=" + queue)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Contains(t, string(body), `data-state="blocked"`, "the tab")
		return rowIDs(t, string(body))
	}
	require.Equal(t, []int64{ids[1]}, get("blocked"), "the dependent, job "+strconv.FormatInt(ids[1], 10))
	require.Equal(t, []int64{ids[0]}, get("pending"), "the dependency")
}
