package stats

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The counters keep the last minute to the second and the
// last hour to the minute, whatever happened before.
func TestStatsWindows(t *testing.T) {
	t.Parallel()
	var m Counters
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	read := func(now time.Time) Figures { return m.Read("q", now) }
	require.Equal(t, Figures{}, read(t0), "nothing counted yet")

	fails := func(queue string, n int, now time.Time) []Failure {
		fs := make([]Failure, n)
		for i := range fs {
			fs[i] = Failure{Queue: queue, Key: fmt.Sprintf("id=%d", i), Error: "boom", At: now}
		}
		return fs
	}
	m.Add("q", 5, fails("q", 1, at(0)), at(0))
	m.Add("q", 2, nil, at(30*time.Second))
	m.Add("q", 1, fails("q", 3, at(59*time.Second)), at(59*time.Second))
	m.Add("other", 100, fails("other", 100, at(0)), at(0))
	st := read(at(59 * time.Second))
	require.Equal(t, [4]int64{8, 4, 8, 4}, [4]int64{st.ProcessedLastMinute, st.FailedLastMinute, st.ProcessedLastHour, st.FailedLastHour})

	st = read(at(60 * time.Second)) // the first second has left the minute
	require.Equal(t, [2]int64{3, 3}, [2]int64{st.ProcessedLastMinute, st.FailedLastMinute})
	require.Equal(t, int64(8), st.ProcessedLastHour)

	m.Add("q", 1, nil, at(61*time.Second+time.Minute)) // reuses slot 1 of the seconds
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

	recent := m.Recent()
	require.Len(t, recent, RecentLimit, "the latest failures, at most RecentLimit")
	require.Equal(t, Failure{Queue: "other", Key: "id=99", Error: "boom", At: at(0)}, recent[0], "newest first")

	m.AddInFlight("q", 3)
	require.Equal(t, 3, read(t0).InFlight)
	m.AddInFlight("q", -3)
	require.Equal(t, 0, read(t0).InFlight)
}
