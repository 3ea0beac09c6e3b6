package bunqueue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The counters behind Stats keep the last minute to the second and the
// last hour to the minute, whatever happened before.
func TestStatsWindows(t *testing.T) {
	t.Parallel()
	var m counters
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	read := func(now time.Time) QueueStats {
		st := QueueStats{Name: "q"}
		m.read(&st, now)
		return st
	}
	require.Equal(t, QueueStats{Name: "q"}, read(t0), "nothing counted yet")

	fails := func(n int) []error {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = &ItemError{Queue: "q", Key: fmt.Sprintf("id=%d", i), Err: errors.New("boom")}
		}
		return errs
	}
	m.add("q", 5, fails(1), at(0))
	m.add("q", 2, []error{&ItemError{Err: Snooze(time.Second)}}, at(30*time.Second)) // a snooze is no failure
	m.add("q", 1, fails(3), at(59*time.Second))
	m.add("other", 100, fails(100), at(0))
	st := read(at(59 * time.Second))
	require.Equal(t, [4]int64{8, 4, 8, 4}, [4]int64{st.ProcessedLastMinute, st.FailedLastMinute, st.ProcessedLastHour, st.FailedLastHour})

	st = read(at(60 * time.Second)) // the first second has left the minute
	require.Equal(t, [2]int64{3, 3}, [2]int64{st.ProcessedLastMinute, st.FailedLastMinute})
	require.Equal(t, int64(8), st.ProcessedLastHour)

	m.add("q", 1, nil, at(61*time.Second+time.Minute)) // reuses slot 1 of the seconds
	st = read(at(61*time.Second + time.Minute))
	require.Equal(t, int64(1), st.ProcessedLastMinute)
	require.Equal(t, int64(9), st.ProcessedLastHour)

	st = read(at(59*time.Minute + 59*time.Second))
	require.Equal(t, int64(0), st.ProcessedLastMinute)
	require.Equal(t, int64(9), st.ProcessedLastHour)
	st = read(at(60 * time.Minute)) // the first minute has left the hour
	require.Equal(t, int64(1), st.ProcessedLastHour)
	st = read(at(3 * time.Hour))
	require.Equal(t, int64(0), st.ProcessedLastHour)

	require.Len(t, m.recent, RecentFailuresLimit, "the latest failures, at most RecentFailuresLimit")
	last := m.recent[len(m.recent)-1]
	require.Equal(t, Failure{Queue: "other", Key: "id=99", Error: "boom", At: at(0)}, last)

	res := m.running("q", 3, func() batchResult {
		require.Equal(t, 3, read(t0).InFlight)
		return batchResult{done: 3}
	})
	require.Equal(t, 3, res.done)
	require.Equal(t, 0, read(t0).InFlight)
}
