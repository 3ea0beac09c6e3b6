package main

import (
	"cmp"
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

// settled returns the statements recorded once no more came for 100 ms
// (at most 2 s): the background sender may still be sending the last
// enqueues' notifications.
func (s *sendClock) settled(ctx context.Context) [][2]int64 {
	n := -1
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		sent := s.sent()
		if len(sent) == n {
			return sent
		}
		n = len(sent)
		time.Sleep(100 * time.Millisecond)
	}
	return s.sent()
}

// wakeClock wraps a Listener and records when each notification of kind
// ("jobs" or "rows") for the queue named queue came (others', for other
// queues on the same channel, are counted apart).
type wakeClock struct {
	next   bunqueue.Listener
	kind   string
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
		if json.Unmarshal([]byte(payload), &m) == nil && m.Kind == w.kind && m.Queue == w.queue {
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

// pathSlow is the latency from the call of Enqueue over which pathNote
// tells which piece of a job's path took longest.
const pathSlow = 20 * time.Millisecond

// pathPieces names the pieces of a job's path that pathNote times.
var pathPieces = []string{"the Enqueue call", "return → the send begins", "the send", "its end → received here", "received → started"}

// pathNote times, for each measured job, the pieces of its way from the
// call of Enqueue to its start: the call, until the child's next
// statement that notifies began (the background sender's lag), that
// statement, from its end until the notification came here, and from
// then until the job started; and, for the jobs that took longer than
// pathSlow, which piece was the longest. The k-th notification that came
// is the k-th sent counted from the last (the first ones may have been
// sent before this process listened); the matching is not done if more
// came than were sent.
func pathNote(jobs map[int64]jobTimes, returned map[int64]int64, sends [][2]int64, came []int64) string {
	if len(sends) == 0 || len(came) > len(sends) {
		return fmt.Sprintf("; no breakdown of the path: %d statements notified, %d notifications came", len(sends), len(came))
	}
	slices.SortFunc(sends, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	offset := len(sends) - len(came)
	pieces := make([][]time.Duration, len(pathPieces))
	slowBy := make([]int, len(pathPieces))
	slow := 0
	for id, r := range returned {
		t, ok := jobs[id]
		if !ok {
			continue
		}
		k, _ := slices.BinarySearchFunc(sends, r, func(e [2]int64, t int64) int { return cmp.Compare(e[0], t) })
		if k >= len(sends) || k < offset {
			continue
		}
		a := came[k-offset]
		p := []time.Duration{
			time.Duration(r - t.enqueued.UnixNano()),
			time.Duration(sends[k][0] - r),
			time.Duration(sends[k][1] - sends[k][0]),
			time.Duration(a - sends[k][1]),
			t.started.Sub(time.Unix(0, a)),
		}
		for i, d := range p {
			pieces[i] = append(pieces[i], d)
		}
		if t.started.Sub(t.enqueued) > pathSlow {
			slow++
			slowBy[slices.Index(p, slices.Max(p))]++
		}
	}
	if len(pieces[0]) == 0 {
		return "; no breakdown of the path: no job matched a notification"
	}
	parts := make([]string, len(pathPieces))
	for i, name := range pathPieces {
		parts[i] = fmt.Sprintf("%s %.2f / %.2f", name, *percentile(pieces[i], 0.5), *percentile(pieces[i], 0.99))
	}
	note := fmt.Sprintf("; the path, p50 / p99 ms over %d jobs: %s", len(pieces[0]), strings.Join(parts, ", "))
	if slow > 0 {
		var by []string
		for i, n := range slowBy {
			if n > 0 {
				by = append(by, fmt.Sprintf("%s %d", pathPieces[i], n))
			}
		}
		note += fmt.Sprintf("; of the %d jobs over %s, the longest piece was %s", slow, pathSlow, strings.Join(by, ", "))
	}
	return note
}
