package bunqueue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// History tells the hour behind ProcessedLastHour and FailedLastHour a
// minute at a time, oldest first, and forgets minutes that left the hour.
func TestStatsHistory(t *testing.T) {
	t.Parallel()
	var m counters
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	h := m.history("q", t0)
	require.Equal(t, t0.Add(-59*time.Minute).UTC(), h.From)
	require.Equal(t, make([]int64, HistoryMinutes), h.Processed, "nothing counted yet")
	require.Equal(t, make([]int64, HistoryMinutes), h.Failed)

	m.add("q", 5, []error{&ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom")}}, t0)
	m.add("q", 2, nil, t0.Add(59*time.Second))
	m.add("q", 3, nil, t0.Add(10*time.Minute+30*time.Second))
	m.add("other", 100, nil, t0.Add(10*time.Minute))
	now := t0.Add(10*time.Minute + 31*time.Second)
	h = m.history("q", now)
	require.Equal(t, "q", h.Queue)
	require.Equal(t, t0.Add(-49*time.Minute).UTC(), h.From, "the minute 59 minutes before now's")
	want := make([]int64, HistoryMinutes)
	want[49], want[59] = 7, 3
	require.Equal(t, want, h.Processed)
	wantFailed := make([]int64, HistoryMinutes)
	wantFailed[49] = 1
	require.Equal(t, wantFailed, h.Failed)

	st := QueueStats{Name: "q"}
	m.read(&st, now)
	require.Equal(t, st.ProcessedLastHour, sumMinutes(h.Processed), "the hour's figures are the minutes' sums")
	require.Equal(t, st.FailedLastHour, sumMinutes(h.Failed))

	h = m.history("q", t0.Add(60*time.Minute)) // the first minute has left the hour
	want = make([]int64, HistoryMinutes)
	want[9] = 3 // minute 10, now the tenth
	require.Equal(t, want, h.Processed)
	require.Equal(t, make([]int64, HistoryMinutes), m.history("q", t0.Add(3*time.Hour)).Processed)
	require.Equal(t, make([]int64, HistoryMinutes), m.history("none", now).Processed)
}

func sumMinutes(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}
