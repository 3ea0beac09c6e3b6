package stats

import (
	"math"
	"time"
)

// The buckets of a minute's waits before start: bucket 0 holds the waits
// under a millisecond, bucket i from 1 on those from 2^((i-1)/4) up to
// 2^(i/4) milliseconds, four to a doubling, each 19% wider than the one
// before; the last one every wait from 2^24 ms (about 4.7 hours) on.
const (
	waitSteps   = 4  // buckets per doubling
	waitOctaves = 24 // doublings from 1 ms
	waitBuckets = 1 + waitSteps*waitOctaves + 1
)

// waitHist is one minute's waits before start: how many jobs started,
// the longest wait, and a histogram of them, of a fixed size whatever the
// number of jobs.
type waitHist struct {
	n      int64
	max    time.Duration
	counts [waitBuckets]uint32
}

// waitBucket returns the bucket of the wait d.
func waitBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 1 {
		return 0
	}
	return min(waitBuckets-1, 1+int(math.Floor(math.Log2(ms)*waitSteps)))
}

// bucketTop returns the upper bound of bucket i, 2^(i/4) ms.
func bucketTop(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/waitSteps) * float64(time.Millisecond))
}

func (h *waitHist) add(d time.Duration) {
	h.n++
	h.max = max(h.max, d)
	h.counts[waitBucket(d)]++
}

// quantile returns the wait that a fraction p (0 < p <= 1) of the waits
// are at most: the top of the bucket that holds it, so at most 19% above
// it, and never above the longest wait. Zero with no wait.
func (h *waitHist) quantile(p float64) time.Duration {
	rank := int64(math.Ceil(p * float64(h.n)))
	var seen int64
	for i, n := range h.counts {
		if seen += int64(n); seen >= rank && n > 0 {
			return min(bucketTop(i), h.max)
		}
	}
	return h.max
}

// waitWindow keeps the waits of the jobs started in each of the last 60
// minutes, a slot a unix minute.
type waitWindow struct {
	at      [HistoryMinutes]int64 // the unix minute each slot holds
	minutes [HistoryMinutes]waitHist
}

func (w *waitWindow) add(minute int64, d time.Duration) {
	i := minute % HistoryMinutes
	if w.at[i] != minute {
		w.at[i], w.minutes[i] = minute, waitHist{}
	}
	w.minutes[i].add(d)
}

// fill sets h's waits of the minutes from first to last (h.From's and
// now's), in the slices History made.
func (w *waitWindow) fill(h *History, first, last int64) {
	for i, at := range w.at {
		if at < first || at > last || w.minutes[i].n == 0 {
			continue
		}
		m, j := &w.minutes[i], at-first
		h.Started[j], h.WaitMax[j] = m.n, m.max
		h.WaitP50[j], h.WaitP95[j] = m.quantile(0.50), m.quantile(0.95)
	}
}

// Started counts the start, at now, of a job of queue that had waited d
// since it became due.
func (m *Counters) Started(queue string, d time.Duration, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queue)
	if q.waits == nil {
		q.waits = &waitWindow{} // a jobs queue's, once it starts a job
	}
	q.waits.add(now.Unix()/60, d)
}
