// Package idle watches a client's idle queues: the queues whose feed's
// last read found nothing new to hand out. Such a feed does not poll its
// queue itself: it waits, and the watcher probes all the idle queues
// with one statement per poll interval and wakes the feeds of the queues
// that have rows:
//
//	/* bunqueue: probe idle queues */ SELECT (SELECT 1 FROM t1 AS t WHERE <conditions> ORDER BY <order> LIMIT 1), (SELECT 1 FROM t2 …)
//
// An idle client thus costs the server one statement per poll interval,
// whatever its number of queues, on a connection of the pool: no new one.
// Each subquery is the queue's read, as its feed sends it, for one row
// (Feed.Probe). Queues are probed together by poll interval: one
// statement per interval, each every [¾·PollInterval, PollInterval].
//
// The probe runs as a plain statement, at the server's isolation level:
// a connection kept for it would take one from the pool that Start sized
// for the workers and the feeds. An idle queue's index does not change,
// and a probe reads one row.
//
// The watcher may also read a few flags with its probe (Flags: the
// queues' pause flags), so that they cost no statement of their own
// while any queue is idle. It calls bun and internal/backoff, and the
// Feeds and Flags it is given; it writes no SQL but the statement that
// holds their subqueries.
package idle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// Comment tags the watcher's statement.
const Comment = "bunqueue: probe idle queues"

// Feed is what the watcher needs of an idle queue's feed.
type Feed interface {
	// Poll is the queue's poll interval: feeds of one interval are
	// probed together, once in each.
	Poll() time.Duration
	// Probe returns the queue's read of one waiting row on db, as a
	// scalar subquery: 1 if the queue has a row the feed has not handed
	// out, NULL if not. It may run the app's code (a queue's query
	// function): Config.Contain runs it.
	Probe(db bun.IDB) *bun.SelectQuery
	// Found wakes the feed, without blocking: its queue has rows, or the
	// probe failed and the feed should read for itself.
	Found()
}

// Flags are values read with the watcher's probe: with the first probe
// of each round, and on their own every Every when no queue is idle.
type Flags interface {
	// Every is how often the flags are read.
	Every() time.Duration
	// Columns returns the flags' scalar subqueries on db, each 1 for set
	// or NULL for not.
	Columns(db bun.IDB) []*bun.SelectQuery
	// Apply receives the flags that Columns read, in its order; it is
	// not called when the statement fails.
	Apply(set []bool)
}

// Config is what a Watcher works with.
type Config struct {
	// DB runs the probes.
	DB bun.IDB
	// Flags, if not nil, are read with the probes.
	Flags Flags
	// Logger receives the probes' failures.
	Logger *slog.Logger
	// Contain runs fn, which builds and runs a probe, so that a panic in
	// the app's code it calls becomes fn's error.
	Contain func(ctx context.Context, fn func() error) error
}

// Watcher holds the idle feeds, grouped by poll interval, and probes
// them while Run runs. Its methods are safe for concurrent use.
type Watcher struct {
	cfg    Config
	mu     sync.Mutex
	groups map[time.Duration]*group
	kick   chan struct{} // cap 1: a group got its first feed
}

// group is the idle feeds of one poll interval, probed together.
type group struct {
	next  time.Time // when they are probed next
	feeds []Feed
}

// New returns a Watcher with no idle feed.
func New(cfg Config) *Watcher {
	return &Watcher{cfg: cfg, groups: map[time.Duration]*group{}, kick: make(chan struct{}, 1)}
}

// Add makes f idle: it is probed with its group, the first time within
// its poll interval, until a probe finds rows for it (then the watcher
// removes it and calls f.Found) or Remove.
func (w *Watcher) Add(f Feed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	poll := f.Poll()
	g := w.groups[poll]
	if g == nil {
		g = &group{next: time.Now().Add(backoff.Between(poll*3/4, poll))}
		w.groups[poll] = g
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	g.feeds = append(g.feeds, f)
}

// Remove makes f busy again, if it was idle.
func (w *Watcher) Remove(f Feed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	poll := f.Poll()
	g := w.groups[poll]
	if g == nil {
		return
	}
	for i, other := range g.feeds {
		if other == f {
			g.feeds = append(g.feeds[:i], g.feeds[i+1:]...)
			break
		}
	}
	if len(g.feeds) == 0 {
		delete(w.groups, poll)
	}
}

// next returns how long until the next probe is due; ok is false when no
// feed is idle.
func (w *Watcher) next(now time.Time) (wait time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.groups {
		if d := g.next.Sub(now); !ok || d < wait {
			wait, ok = d, true
		}
	}
	return max(wait, 0), ok
}

// dueGroup is the feeds of one poll interval whose probe is due.
type dueGroup struct {
	poll  time.Duration
	feeds []Feed
}

// due returns the groups whose probe is due, each with a copy of its
// feeds, and schedules each group's next probe as if it took no time;
// probed moves it to after the probe.
func (w *Watcher) due(now time.Time) []dueGroup {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []dueGroup
	for poll, g := range w.groups {
		if g.next.After(now) {
			continue
		}
		out = append(out, dueGroup{poll, append([]Feed(nil), g.feeds...)})
		g.next = now.Add(backoff.Between(poll*3/4, poll))
	}
	return out
}

// probed schedules the next probe of poll's group a poll interval after
// the probe that ended at end, so a slow probe is not followed at once
// by the next.
func (w *Watcher) probed(poll time.Duration, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[poll]; g != nil {
		g.next = end.Add(backoff.Between(poll*3/4, poll))
	}
}
