package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// The path of a notification from one process's Enqueue to the start of
// the job in another's worker, timed in pieces, for
// latency-xproc-notify: the child times the statements that notify
// (sendClock), this process when each notification for its queue came
// (wakeClock).

// notifyComment is how bunqueue's statements that notify begin.
const notifyComment = "/* bunqueue: notify */"

// sendClock is a bun.QueryHook that records when each statement that
// notifies started and ended.
type sendClock struct {
	mu    sync.Mutex
	sends [][2]int64
}

// BeforeQuery implements bun.QueryHook.
func (s *sendClock) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

// AfterQuery implements bun.QueryHook.
func (s *sendClock) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if e.Err != nil || !strings.HasPrefix(e.Query, notifyComment) {
		return
	}
	end := time.Now().UnixNano()
	s.mu.Lock()
	s.sends = append(s.sends, [2]int64{e.StartTime.UnixNano(), end})
	s.mu.Unlock()
}

// sent returns the statements recorded, in the order they ended.
func (s *sendClock) sent() [][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sends)
}

// wakeClock wraps a Listener and records when each notification for the
// jobs queue named queue came (others', for other queues on the same
// channel, are counted apart).
type wakeClock struct {
	next   bunqueue.Listener
	queue  string
	last   atomic.Int64 // UnixNano of the last notification for queue; 0 before it
	count  atomic.Int64
	others atomic.Int64

	mu   sync.Mutex
	came []int64
}

// Listen implements bunqueue.Listener.
func (w *wakeClock) Listen(ctx context.Context, channel string, listening func(), notified func(payload string)) error {
	return w.next.Listen(ctx, channel, listening, func(payload string) {
		now := time.Now().UnixNano()
		var m struct {
			Kind  string `json:"kind"`
			Queue string `json:"queue"`
		}
		if json.Unmarshal([]byte(payload), &m) == nil && m.Kind == "jobs" && m.Queue == w.queue {
			w.last.Store(now)
			w.count.Add(1)
			w.mu.Lock()
			w.came = append(w.came, now)
			w.mu.Unlock()
		} else {
			w.others.Add(1)
		}
		notified(payload)
	})
}

// sinceLast returns how long ago the last notification for the queue
// came, if one did.
func (w *wakeClock) sinceLast(now time.Time) (time.Duration, bool) {
	last := w.last.Load()
	if last == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, last)), true
}

// arrivals returns when the notifications for the queue came, in order.
func (w *wakeClock) arrivals() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.came)
}

// pathNote times, for each measured job, the pieces of its way from the
// return of Enqueue to its start: until the child's next statement that
// notifies began (the background sender's lag), that statement, from its
// end until the notification came here, and from then until the job
// started. The k-th notification that came is the k-th sent counted
// from the last (the first ones may have been sent before this process
// listened); the matching is not done if more came than were sent.
func pathNote(started map[int64]time.Time, returned map[int64]int64, sends [][2]int64, came []int64) string {
	if len(sends) == 0 || len(came) > len(sends) {
		return fmt.Sprintf("; no breakdown of the path: %d statements notified, %d notifications came", len(sends), len(came))
	}
	slices.SortFunc(sends, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	offset := len(sends) - len(came)
	var lag, send, deliver, wake []time.Duration
	for id, r := range returned {
		s, ok := started[id]
		if !ok {
			continue
		}
		k, _ := slices.BinarySearchFunc(sends, r, func(e [2]int64, t int64) int { return int(e[0] - t) })
		if k >= len(sends) || k < offset {
			continue
		}
		a := came[k-offset]
		lag = append(lag, time.Duration(sends[k][0]-r))
		send = append(send, time.Duration(sends[k][1]-sends[k][0]))
		deliver = append(deliver, time.Duration(a-sends[k][1]))
		wake = append(wake, s.Sub(time.Unix(0, a)))
	}
	if len(lag) == 0 {
		return "; no breakdown of the path: no job matched a notification"
	}
	pct := func(ds []time.Duration) string {
		return fmt.Sprintf("%.2f / %.2f", *percentile(ds, 0.5), *percentile(ds, 0.99))
	}
	return fmt.Sprintf("; the path, p50 / p99 ms over %d jobs: return → the send begins %s, the send %s, its end → received here %s, received → started %s",
		len(lag), pct(lag), pct(send), pct(deliver), pct(wake))
}
