package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bunqueue/bunqueue/internal/stats"
	"github.com/stretchr/testify/require"
)

// The errors of finished items that Stats counts as failures, and how
// RecentFailures describes them: a snooze is none, nor a job given back
// on stop; a message is cut to RecentFailureBytes.
func TestStatsFailures(t *testing.T) {
	t.Parallel()
	require.Equal(t, RecentFailuresLimit, stats.RecentLimit)
	require.Equal(t, HistoryMinutes, stats.HistoryMinutes)

	c := &Client{}
	m := &c.counts
	now := time.Unix(1_800_000_000, 0)
	long := "x" + strings.Repeat("é", RecentFailureBytes/2) // cut inside a rune
	m.add("q", 2, nil, []error{
		&ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom")},
		&ItemError{Queue: "q", Key: "id=2", Err: Snooze(time.Second)},
		&ItemError{Queue: "q", Key: "id=3", Err: fmt.Errorf("released on stop: %w", context.Canceled)},
		errors.New(long),
	}, now)
	st := QueueStats{Name: "q"}
	m.read(&st, now)
	require.Equal(t, [2]int64{2, 2}, [2]int64{st.ProcessedLastMinute, st.FailedLastMinute})

	require.Equal(t, []Failure{
		{Queue: "q", Error: long[:RecentFailureBytes-1], At: now},
		{Queue: "q", Key: "id=1", Error: "boom", At: now},
	}, c.RecentFailures())
}
