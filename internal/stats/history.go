package stats

import "time"

// HistoryMinutes is how many minutes History returns: the last hour, a
// minute a slot (the root's HistoryMinutes).
const HistoryMinutes = 60

// History is one queue's counts in each of the last HistoryMinutes
// minutes, oldest first. Its fields are the root's QueueHistory's, in
// their order, so that one converts to the other; QueueHistory documents
// them.
type History struct {
	// Queue is the queue's name.
	Queue string
	// From is when the first minute began, in UTC, on a whole minute.
	From time.Time
	// Processed and Failed count the rows and jobs that completed and
	// failed in each minute.
	Processed []int64
	Failed    []int64
	// Started counts the jobs started in each minute.
	Started []int64
	// WaitP50, WaitP95 and WaitMax are the median, the 95th percentile
	// and the longest of the waits before start of each minute's jobs.
	WaitP50 []time.Duration
	WaitP95 []time.Duration
	WaitMax []time.Duration
}

// History returns the minutes of queue up to and including now's: zeros
// for a queue that counted nothing.
func (m *Counters) History(queue string, now time.Time) History {
	last := now.Unix() / 60
	first := last - HistoryMinutes + 1
	h := History{Queue: queue, From: time.Unix(first*60, 0).UTC(),
		Processed: make([]int64, HistoryMinutes), Failed: make([]int64, HistoryMinutes), Started: make([]int64, HistoryMinutes),
		WaitP50: make([]time.Duration, HistoryMinutes), WaitP95: make([]time.Duration, HistoryMinutes), WaitMax: make([]time.Duration, HistoryMinutes)}
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[queue]
	if q == nil {
		return h
	}
	w := &q.minutes
	for i, at := range w.at {
		if at >= first && at <= last {
			h.Processed[at-first] = w.processed[i]
			h.Failed[at-first] = w.failed[i]
		}
	}
	if q.waits != nil {
		q.waits.fill(&h, first, last)
	}
	return h
}
