package stats

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// History tells the hour behind ProcessedLastHour and FailedLastHour a
// minute at a time, oldest first, and forgets minutes that left the hour.
func TestStatsHistory(t *testing.T) {
	t.Parallel()
	var m Counters
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	h := m.History("q", t0)
	require.Equal(t, t0.Add(-59*time.Minute).UTC(), h.From)
	require.Equal(t, make([]int64, HistoryMinutes), h.Processed, "nothing counted yet")
	require.Equal(t, make([]int64, HistoryMinutes), h.Failed)

	m.Add("q", 5, nil, []Failure{{Queue: "q", Key: "id=1", Error: "boom", At: t0}}, t0)
	m.Add("q", 2, nil, nil, t0.Add(59*time.Second))
	m.Add("q", 3, nil, nil, t0.Add(10*time.Minute+30*time.Second))
	m.Add("other", 100, nil, nil, t0.Add(10*time.Minute))
	now := t0.Add(10*time.Minute + 31*time.Second)
	h = m.History("q", now)
	require.Equal(t, "q", h.Queue)
	require.Equal(t, t0.Add(-49*time.Minute).UTC(), h.From, "the minute 59 minutes before now's")
	want := make([]int64, HistoryMinutes)
	want[49], want[59] = 7, 3
	require.Equal(t, want, h.Processed)
	wantFailed := make([]int64, HistoryMinutes)
	wantFailed[49] = 1
	require.Equal(t, wantFailed, h.Failed)

	st := m.Read("q", now)
	require.Equal(t, st.ProcessedLastHour, sumMinutes(h.Processed), "the hour's figures are the minutes' sums")
	require.Equal(t, st.FailedLastHour, sumMinutes(h.Failed))

	h = m.History("q", t0.Add(60*time.Minute)) // the first minute has left the hour
	want = make([]int64, HistoryMinutes)
	want[9] = 3 // minute 10, now the tenth
	require.Equal(t, want, h.Processed)
	require.Equal(t, make([]int64, HistoryMinutes), m.History("q", t0.Add(3*time.Hour)).Processed)
	require.Equal(t, make([]int64, HistoryMinutes), m.History("none", now).Processed)
}

func sumMinutes(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// The histogram of a minute's waits: its buckets are four to a doubling
// from 1 ms; a percentile is the top of its bucket, never above the
// longest wait.
func TestWaitHistogram(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {999 * time.Microsecond, 0}, {time.Millisecond, 1}, {1189 * time.Microsecond, 1},
		{1190 * time.Microsecond, 2}, {2 * time.Millisecond, 5}, {time.Second, 1 + 4*9 + 3}, // 2^9.75 ms < 1 s < 2^10 ms
		{5 * time.Hour, waitBuckets - 1}, {1000 * time.Hour, waitBuckets - 1},
	} {
		require.Equal(t, c.want, waitBucket(c.d), "the bucket of %v", c.d)
		if c.want < waitBuckets-1 {
			require.Less(t, c.d, bucketTop(c.want), "%v is under its bucket's top", c.d)
		}
	}
	var h waitHist
	require.Zero(t, h.quantile(0.5), "no wait")
	for range 90 {
		h.add(10 * time.Millisecond) // bucket 14: 2^3.25 to 2^3.5 ms
	}
	for range 9 {
		h.add(300 * time.Millisecond)
	}
	h.add(2 * time.Minute)
	require.Equal(t, int64(100), h.n)
	require.Equal(t, bucketTop(14), h.quantile(0.50))
	require.InDelta(t, 11.3, h.quantile(0.50).Seconds()*1000, 0.1, "within 19% above the median")
	require.Equal(t, bucketTop(waitBucket(300*time.Millisecond)), h.quantile(0.95))
	require.Equal(t, 2*time.Minute, h.quantile(1), "the top bucket's top is above the longest wait")
	require.Equal(t, 2*time.Minute, h.max)

	var one waitHist
	one.add(700 * time.Microsecond)
	require.Equal(t, 700*time.Microsecond, one.quantile(0.5), "under 1 ms: the longest wait, below the bucket's top")
}

// History's waits: a minute a slot, the minutes with no start zero and
// told apart by Started, and minutes that left the hour forgotten.
func TestWaitHistory(t *testing.T) {
	t.Parallel()
	var m Counters
	t0 := time.Unix(1_800_000_000, 0) // on a minute boundary
	m.Started("q", 400*time.Millisecond, t0)
	m.Started("q", 0, t0.Add(30*time.Second))
	m.Started("q", 2*time.Second, t0.Add(59*time.Second))
	m.Started("q", 0, t0.Add(10*time.Minute))
	m.Started("other", time.Hour, t0)
	m.Add("table", 3, nil, nil, t0)

	h := m.History("q", t0.Add(10*time.Minute+1*time.Second))
	zeros := make([]time.Duration, HistoryMinutes)
	started, p50, p95, most := make([]int64, HistoryMinutes), slices.Clone(zeros), slices.Clone(zeros), slices.Clone(zeros)
	started[49], started[59] = 3, 1
	p50[49], p95[49], most[49] = bucketTop(waitBucket(400*time.Millisecond)), 2*time.Second, 2*time.Second
	require.Equal(t, started, h.Started)
	require.Equal(t, p50, h.WaitP50)
	require.Equal(t, p95, h.WaitP95)
	require.Equal(t, most, h.WaitMax)
	require.Zero(t, h.WaitMax[59], "a start with no wait")

	h = m.History("q", t0.Add(60*time.Minute)) // the first minute has left the hour
	started = make([]int64, HistoryMinutes)
	started[9] = 1 // minute 10, now the tenth
	require.Equal(t, started, h.Started)
	require.Equal(t, zeros, h.WaitMax)

	m.Started("q", time.Second, t0.Add(70*time.Minute)) // the slot of minute 10 again
	h = m.History("q", t0.Add(70*time.Minute))
	started = make([]int64, HistoryMinutes)
	started[59] = 1
	require.Equal(t, started, h.Started, "minute 10's slot now counts minute 70")
	require.Equal(t, time.Second, h.WaitMax[59])

	require.Equal(t, make([]int64, HistoryMinutes), m.History("table", t0).Started, "a table queue starts no job")
	require.Equal(t, zeros, m.History("none", t0).WaitP95)
}
