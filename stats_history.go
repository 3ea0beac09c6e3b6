package bunqueue

import "time"

// HistoryMinutes is how many minutes Client.History returns: the last
// hour, a minute a slot.
const HistoryMinutes = 60

// QueueHistory is what Client.History tells of one queue: the rows and
// jobs this process's workers completed and failed in each of the last
// HistoryMinutes minutes, oldest first, the counts behind
// QueueStats.ProcessedLastHour and FailedLastHour.
type QueueHistory struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	// From is when the first minute began, in UTC, on a whole minute. The
	// last minute, From + 59 minutes, is the current one, still counting.
	From time.Time `json:"from"`
	// Processed and Failed count, for each minute, what QueueStats'
	// ProcessedLastHour and FailedLastHour count over the hour: their
	// sums are those figures, read at the same time.
	Processed []int64 `json:"processed"`
	Failed    []int64 `json:"failed"`
}

// History returns the per-minute counts of the queue named queue over the
// last hour, as this process counted them since NewClient (zeros for a
// queue it did not run, or that has no such name). It only reads memory.
func (c *Client) History(queue string) QueueHistory {
	return c.counts.history(queue, time.Now())
}

// history returns the minutes of queue up to and including now's.
func (m *counters) history(queue string, now time.Time) QueueHistory {
	last := now.Unix() / 60
	first := last - HistoryMinutes + 1
	h := QueueHistory{Queue: queue, From: time.Unix(first*60, 0).UTC(),
		Processed: make([]int64, HistoryMinutes), Failed: make([]int64, HistoryMinutes)}
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
	return h
}
