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
	m.Add("q", 5, nil, fails("q", 1, at(0)), at(0))
	m.Add("q", 2, nil, nil, at(30*time.Second))
	m.Add("q", 1, nil, fails("q", 3, at(59*time.Second)), at(59*time.Second))
	m.Add("other", 100, nil, fails("other", 100, at(0)), at(0))
	st := read(at(59 * time.Second))
	require.Equal(t, [4]int64{8, 4, 8, 4}, [4]int64{st.ProcessedLastMinute, st.FailedLastMinute, st.ProcessedLastHour, st.FailedLastHour})

	st = read(at(60 * time.Second)) // the first second has left the minute
	require.Equal(t, [2]int64{3, 3}, [2]int64{st.ProcessedLastMinute, st.FailedLastMinute})
	require.Equal(t, int64(8), st.ProcessedLastHour)

	m.Add("q", 1, nil, nil, at(61*time.Second+time.Minute)) // reuses slot 1 of the seconds
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

// A completion marks the kept failures of its row that no completion
// marked yet, of its queue only; a later failure waits for the next one.
func TestStatsSucceededAt(t *testing.T) {
	t.Parallel()
	var m Counters
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	fail := func(queue, key string, now time.Time) []Failure {
		return []Failure{{Queue: queue, Key: key, Error: "boom", At: now}}
	}
	keys := func(k ...string) func() []string { return func() []string { return k } }
	m.Add("q", 0, nil, fail("q", "id=1", at(0)), at(0))
	m.Add("q", 0, nil, fail("q", "id=2", at(1)), at(1))
	m.Add("other", 0, nil, fail("other", "id=1", at(2)), at(2))
	m.Add("q", 1, nil, nil, at(3)) // keys unknown: marks nothing
	m.Add("q", 2, keys("id=1", "id=3"), nil, at(4))
	m.Add("q", 0, nil, fail("q", "id=1", at(5)), at(5))
	m.Add("q", 1, keys("id=1"), nil, at(6))

	byAt := map[time.Time]time.Time{}
	for _, f := range m.Recent() {
		byAt[f.At] = f.SucceededAt
	}
	require.Equal(t, map[time.Time]time.Time{at(0): at(4), at(1): {}, at(2): {}, at(5): at(6)}, byAt)

	called := false
	m.Add("none", 1, func() []string { called = true; return nil }, nil, at(7))
	require.False(t, called, "a queue without unmarked failures looks up no keys")

	// The failures that leave the kept ones leave the count of unmarked.
	for i := range RecentLimit {
		m.Add("q", 0, nil, fail("q", fmt.Sprintf("id=%d", 100+i), at(10)), at(10))
	}
	m.mu.Lock()
	n := len(m.queues["q"].unmarked)
	m.mu.Unlock()
	require.Equal(t, RecentLimit, n)
	m.Add("other", 0, nil, fail("other", "id=9", at(11)), at(11))
	m.mu.Lock()
	n = len(m.queues["q"].unmarked)
	m.mu.Unlock()
	require.Equal(t, RecentLimit-1, n)
}
