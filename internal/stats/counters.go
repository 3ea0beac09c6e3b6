// Package stats keeps a client's in-process counts of its queues: the
// items in flight, the items processed and failed in each of the last 60
// seconds and 60 minutes, the waits before start of the jobs started in
// each minute, and the latest failures. It calls only the standard
// library; what counts as a failure, and how one is described, its caller
// decides.
package stats

import (
	"slices"
	"sync"
	"time"
)

// RecentLimit is how many failures a Counters keeps: the root's
// RecentFailuresLimit.
const RecentLimit = 100

// Failure is one failure of a row or job: its queue, the key of its row,
// its message, when it was counted, and when the same row (queue and
// key) was first completed after it (zero: not since). Its fields are
// the root's Failure's, in their order, so that one converts to the
// other.
type Failure struct {
	Queue       string
	Key         string
	Error       string
	At          time.Time
	SucceededAt time.Time
}

// Figures are one queue's counts as of a time: its items in flight, and
// those processed and failed over the last minute (to the second) and
// the last hour (to the minute).
type Figures struct {
	InFlight            int
	ProcessedLastMinute int64
	FailedLastMinute    int64
	ProcessedLastHour   int64
	FailedLastHour      int64
}

// Counters are a client's in-memory counts, by queue name. The zero
// value is ready to use; it is safe for concurrent use.
type Counters struct {
	mu     sync.Mutex
	queues map[string]*queueCounts
	recent []Failure // oldest first
}

// queueCounts are one queue's counts.
type queueCounts struct {
	inFlight int
	// unmarked counts, by key, the kept failures of the queue's rows
	// that no completion marked yet: nil when there are none, so that a
	// batch of a queue without recent failures looks up nothing.
	unmarked map[string]int
	seconds  window      // by unix second
	minutes  window      // by unix minute
	waits    *waitWindow // a jobs queue's waits before start, nil until one started
}

// window counts events in 60 slots of one unit of time each.
type window struct {
	at        [60]int64 // the unit each slot counts
	processed [60]int64
	failed    [60]int64
}

func (w *window) add(unit, processed, failed int64) {
	i := unit % 60
	if w.at[i] != unit {
		w.at[i], w.processed[i], w.failed[i] = unit, 0, 0
	}
	w.processed[i] += processed
	w.failed[i] += failed
}

// sum adds up the slots of the 60 units up to and including unit.
func (w *window) sum(unit int64) (processed, failed int64) {
	for i := range w.at {
		if w.at[i] <= unit && w.at[i] > unit-60 {
			processed += w.processed[i]
			failed += w.failed[i]
		}
	}
	return processed, failed
}

// queue returns the counts of queue. Call with m.mu held.
func (m *Counters) queue(name string) *queueCounts {
	if m.queues == nil {
		m.queues = map[string]*queueCounts{}
	}
	q := m.queues[name]
	if q == nil {
		q = &queueCounts{}
		m.queues[name] = q
	}
	return q
}

// Add counts rows or jobs of queue that finished at now: processed of
// them completed, and failures failed. It keeps the failures, the latest
// RecentLimit of them. completed, if not nil, returns the keys of the
// completed rows: the kept failures of those rows that no completion
// marked yet get now as their SucceededAt. It is called only when queue
// has such failures, so that a queue without them pays nothing for it.
func (m *Counters) Add(queue string, processed int, completed func() []string, failures []Failure, now time.Time) {
	if processed == 0 && len(failures) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queue)
	q.seconds.add(now.Unix(), int64(processed), int64(len(failures)))
	q.minutes.add(now.Unix()/60, int64(processed), int64(len(failures)))
	if len(q.unmarked) > 0 && processed > 0 && completed != nil {
		for _, key := range completed() {
			m.mark(queue, q, key, now)
		}
	}
	for _, f := range failures {
		if fq := m.queue(f.Queue); f.Key != "" {
			if fq.unmarked == nil {
				fq.unmarked = map[string]int{}
			}
			fq.unmarked[f.Key]++
		}
	}
	m.recent = append(m.recent, failures...)
	if over := len(m.recent) - RecentLimit; over > 0 {
		for _, f := range m.recent[:over] {
			if f.Key != "" && f.SucceededAt.IsZero() {
				m.forget(m.queues[f.Queue], f.Key)
			}
		}
		m.recent = append(m.recent[:0], m.recent[over:]...)
	}
}

// mark sets the SucceededAt of the kept failures of key, a row of queue
// (whose counts are q) just completed at now, that no completion marked
// yet. Call with m.mu held.
func (m *Counters) mark(queue string, q *queueCounts, key string, now time.Time) {
	if q.unmarked[key] == 0 {
		return
	}
	delete(q.unmarked, key)
	if len(q.unmarked) == 0 {
		q.unmarked = nil
	}
	for i := range m.recent {
		if f := &m.recent[i]; f.Queue == queue && f.Key == key && f.SucceededAt.IsZero() {
			f.SucceededAt = now
		}
	}
}

// forget takes one unmarked failure of key off q's count, as it leaves
// the kept failures. Call with m.mu held.
func (m *Counters) forget(q *queueCounts, key string) {
	if q == nil {
		return
	}
	if q.unmarked[key]--; q.unmarked[key] <= 0 {
		delete(q.unmarked, key)
		if len(q.unmarked) == 0 {
			q.unmarked = nil
		}
	}
}

// AddInFlight adds n (negative: takes -n) to the rows or jobs of queue in
// flight.
func (m *Counters) AddInFlight(queue string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue(queue).inFlight += n
}

// Read returns the figures of queue as of now: zero for a queue that
// counted nothing.
func (m *Counters) Read(queue string, now time.Time) Figures {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[queue]
	if q == nil {
		return Figures{}
	}
	f := Figures{InFlight: q.inFlight}
	f.ProcessedLastMinute, f.FailedLastMinute = q.seconds.sum(now.Unix())
	f.ProcessedLastHour, f.FailedLastHour = q.minutes.sum(now.Unix() / 60)
	return f
}

// Recent returns the failures kept, newest first.
func (m *Counters) Recent() []Failure {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.recent)
	slices.Reverse(out)
	return out
}
