package bunqueue

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// An idle queue is one whose feed's last read found nothing new to hand
// out. Its feed does not poll the queue itself: it waits, and lets its
// connection go after a poll interval, and the client's idle watcher
// probes all the client's idle queues with one statement per poll
// interval and wakes the feeds of the queues that have rows:
//
//	/* bunqueue: probe idle queues */ SELECT (SELECT 1 FROM t1 AS t WHERE <conditions> ORDER BY <order> LIMIT 1), (SELECT 1 FROM t2 …)
//
// An idle client thus costs the server one statement per poll interval,
// whatever its number of queues, on a connection of the pool: no new one.
// Each subquery is the queue's read, as the feed sends it, for one row:
// the same plan, without the rows this process cools down (a row cooling
// down does not wake its queue until its wait ends) or holds (the rows
// its workers took and have not finished). Queues are probed together by
// poll interval: one statement per interval, each every [¾·PollInterval,
// PollInterval]. A commit that the wake-up hook sees wakes a feed at once,
// as before.
//
// The probe runs as a plain statement, at the server's isolation level,
// where a feed on MySQL reads at READ UNCOMMITTED on a connection of its
// own: a connection kept for the probe would take one from the pool that
// Start sized for the workers and the feeds. A feed's reads need READ
// UNCOMMITTED while workers change the queue's index; an idle queue's
// index does not change, and a probe reads one row.

// probeExcept is the most rows in flight that a queue's probe leaves out
// by key. A queue with more in flight is probed without leaving them out:
// the probe finds them, and its feed reads, as every feed did at each
// poll before the watcher.
const probeExcept = 100

// probeComment tags the watcher's statement.
const probeComment = "bunqueue: probe idle queues"

// idleWatch holds the client's idle feeds, grouped by poll interval.
type idleWatch struct {
	mu     sync.Mutex
	groups map[time.Duration]*idleGroup
	kick   chan struct{} // cap 1: a group got its first feed
}

// idleGroup is the idle feeds of one poll interval, probed together.
type idleGroup struct {
	next  time.Time // when they are probed next
	feeds []*feed
}

func newIdleWatch() *idleWatch {
	return &idleWatch{groups: map[time.Duration]*idleGroup{}, kick: make(chan struct{}, 1)}
}

// add makes f idle: it is probed with its group, the first time within
// its poll interval.
func (w *idleWatch) add(f *feed) {
	select {
	case <-f.found: // from a probe that ran while it was leaving
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[f.r.poll]
	if g == nil {
		g = &idleGroup{next: time.Now().Add(backoff.Between(f.r.poll*3/4, f.r.poll))}
		w.groups[f.r.poll] = g
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	g.feeds = append(g.feeds, f)
}

// remove makes f busy again, if it was idle.
func (w *idleWatch) remove(f *feed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[f.r.poll]
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
		delete(w.groups, f.r.poll)
	}
}

// next returns how long until the next probe is due; ok is false when no
// feed is idle.
func (w *idleWatch) next(now time.Time) (wait time.Duration, ok bool) {
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
	feeds []*feed
}

// due returns the groups whose probe is due, each with a copy of its
// feeds, and schedules each group's next probe as if it took no time;
// probed moves it to after the probe.
func (w *idleWatch) due(now time.Time) []dueGroup {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []dueGroup
	for poll, g := range w.groups {
		if g.next.After(now) {
			continue
		}
		out = append(out, dueGroup{poll, append([]*feed(nil), g.feeds...)})
		g.next = now.Add(backoff.Between(poll*3/4, poll))
	}
	return out
}

// probed schedules the next probe of poll's group a poll interval after
// the probe that ended at end, so a slow probe is not followed at once
// by the next.
func (w *idleWatch) probed(poll time.Duration, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[poll]; g != nil {
		g.next = end.Add(backoff.Between(poll*3/4, poll))
	}
}

// watchIdle probes the client's idle queues until Stop. It keeps its
// connection while any queue is idle. It reads the queues' pause flags
// (see pause.go) with the first probe of each round, and on their own at
// the shortest poll interval when no queue is idle.
func (c *Client) watchIdle(ctx context.Context) {
	defer c.workers.Done()
	w := c.idle
	p := c.pauses.Load()
	flagsOn := p != nil && p.on
	var flagsDue time.Time
	if flagsOn {
		flagsDue = time.Now().Add(backoff.Between(p.every*3/4, p.every))
	}
	failing := false
	for {
		wait, ok := w.next(time.Now())
		if d := max(time.Until(flagsDue), 0); flagsOn && (!ok || d < wait) {
			wait, ok = d, true
		}
		if !ok {
			wait = time.Hour // until a kick
		}
		t := time.NewTimer(wait)
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-w.kick:
			t.Stop()
			continue
		case <-t.C:
		}
		groups := w.due(time.Now())
		if flagsOn && len(groups) == 0 && !time.Now().Before(flagsDue) {
			groups = []dueGroup{{}} // the flags alone
		}
		for i, g := range groups {
			var flags *pauses
			if flagsOn && i == 0 {
				flags = p
			}
			failing = c.probe(ctx, g.feeds, flags, failing)
			if g.feeds != nil {
				w.probed(g.poll, time.Now())
			}
			if flags != nil {
				flagsDue = time.Now().Add(backoff.Between(p.every*3/4, p.every))
			}
		}
	}
}

// probe runs one statement that tells, for each of feeds, whether its
// queue has a waiting row that the feed has not handed out, and wakes the
// feeds of the queues that have; with flags, it reads the queues' pause
// flags too, and applies them. If the statement fails, it wakes the feeds
// all: each reads for itself, and reports its own error; the flags stay
// as they were. It reports whether the statement failed; failing is
// whether the last one did, which was logged.
func (c *Client) probe(ctx context.Context, feeds []*feed, flags *pauses, failing bool) bool {
	cols := flags.columns(c.db)
	found := make([]sql.NullInt64, len(feeds)+len(cols))
	dest := make([]any, len(found))
	for i := range found {
		dest[i] = &found[i]
	}
	// The queues' query functions run here: a panic in one is this
	// probe's failure, and each feed's own read then reports it.
	err := contain(ctx, func() error {
		sel := c.db.NewSelect().Comment(probeComment)
		for _, f := range feeds {
			sel = sel.ColumnExpr("(?)", f.r.probe(c.db, f.inFlight()))
		}
		for _, col := range cols {
			sel = sel.ColumnExpr("(?)", col)
		}
		return sel.Scan(ctx, dest...)
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return failing
	case err != nil && !failing:
		c.cfg.Logger.WarnContext(ctx, "bunqueue: probing the idle queues failed: each reads for itself until a probe succeeds", "error", err)
	case err != nil:
		c.cfg.Logger.DebugContext(ctx, "bunqueue: probing the idle queues failed", "error", err)
	}
	if err == nil && len(cols) > 0 {
		for i, name := range flags.names {
			c.applyPause(name, found[len(feeds)+i].Valid)
		}
	}
	for i, f := range feeds {
		if err != nil || found[i].Valid {
			c.idle.remove(f)
			select {
			case f.found <- struct{}{}:
			default:
			}
		}
	}
	return err != nil
}

// waitIdle waits, after a read that found nothing new, until the idle
// watcher finds rows in the queue or a commit in this process wakes it;
// false if the client stops first. A poll interval without either lets
// the feed's connection go, as the workers let theirs.
func (c *Client) waitIdle(f *feed, rd *reader) bool {
	c.idle.add(f)
	defer c.idle.remove(f)
	drop := time.NewTimer(f.r.poll)
	defer drop.Stop()
	for {
		select {
		case <-c.stopping:
			return false
		case <-f.r.wake:
			f.release()
			return true
		case <-f.found:
			return true
		case <-drop.C:
			rd.end()
		}
	}
}

// probe returns the queue's read of its waiting rows on db as a
// scalar subquery for the idle watcher's probe: 1 if it finds a row that
// is neither cooling down nor one of except, NULL if not.
func (q *Queue[T]) probe(db bun.IDB, except []feedKey) *bun.SelectQuery {
	sel := q.waiting(db, (*T)(nil)).ColumnExpr("1").Limit(1)
	if len(except) > 0 {
		sel = q.exceptKeys(sel, except)
	}
	return sel
}
