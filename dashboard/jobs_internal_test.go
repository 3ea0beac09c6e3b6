package dashboard

import (
	"testing"
	"time"

	"github.com/bunqueue/bunqueue"
)

// The When column names the time each state shows.
func TestWhenOf(t *testing.T) {
	runAt := time.Date(2025, 6, 3, 14, 0, 0, 0, time.UTC)
	done := runAt.Add(time.Minute)
	for _, tc := range []struct {
		job  bunqueue.JobRecord
		want whenShown
	}{
		{bunqueue.JobRecord{State: bunqueue.JobStatePending, RunAt: runAt}, whenShown{"due", runAt}},
		{bunqueue.JobRecord{State: bunqueue.JobStateScheduled, RunAt: runAt}, whenShown{"due", runAt}},
		{bunqueue.JobRecord{State: bunqueue.JobStateRetrying, RunAt: runAt}, whenShown{"due", runAt}},
		{bunqueue.JobRecord{State: bunqueue.JobStateRunning, RunAt: runAt}, whenShown{"lease ends", runAt}},
		{bunqueue.JobRecord{State: bunqueue.JobStateCompleted, RunAt: runAt, CompletedAt: &done}, whenShown{"completed", done}},
		{bunqueue.JobRecord{State: bunqueue.JobStateFailed, Failed: &bunqueue.FailedJob{FailedAt: done}}, whenShown{"failed", done}},
	} {
		if got := whenOf(tc.job); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.job.State, got, tc.want)
		}
	}
}
