package bunqueue

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/idle"
)

// An idle queue is one whose feed's last read found nothing new to hand
// out. Its feed does not poll the queue itself: it waits, and lets its
// connection go after a poll interval, and the client's idle watcher
// (internal/idle) probes all the client's idle queues with one statement
// per poll interval and wakes the feeds of the queues that have rows. A
// commit that the wake-up hook sees wakes a feed at once, as before.
//
// Each queue's probe is its read, as the feed sends it, for one row: the
// same plan, without the rows this process cools down (a row cooling
// down does not wake its queue until its wait ends) or holds (the rows
// its workers took and have not finished). A feed on MySQL reads at READ
// UNCOMMITTED on a connection of its own, while workers change the
// queue's index; the probe runs on the pool, at the server's level.

// probeExcept is the most rows in flight that a queue's probe leaves out
// by key. A queue with more in flight is probed without leaving them out:
// the probe finds them, and its feed reads, as every feed did at each
// poll before the watcher.
const probeExcept = 100

// newIdleWatch returns the client's idle watcher, which reads the pause
// flags of its queues (see pause.go) with its probes. Call it after the
// pauses are set.
func (c *Client) newIdleWatch() *idle.Watcher {
	cfg := idle.Config{DB: c.db, Logger: c.cfg.Logger, Contain: contain}
	if p := c.pauses.Load(); p != nil && p.on {
		cfg.Flags = p
	}
	return idle.New(cfg)
}

// watchIdle probes the client's idle queues until Stop.
func (c *Client) watchIdle(ctx context.Context) {
	defer c.workers.Done()
	c.idle.Run(ctx, c.stopping)
}

// waitIdle waits, after a read that found nothing new, until the idle
// watcher finds rows in the queue or a commit in this process wakes it;
// false if the client stops first. A poll interval without either lets
// the feed's connection go, as the workers let theirs.
func (c *Client) waitIdle(f *feed, rd *reader) bool {
	select {
	case <-f.found: // from a probe that ran while it was leaving
	default:
	}
	c.idle.Add(f)
	defer c.idle.Remove(f)
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

// Poll implements idle.Feed: the queue's poll interval.
func (f *feed) Poll() time.Duration { return f.r.poll }

// Probe implements idle.Feed: the queue's read of one row that is
// neither cooling down nor in flight.
func (f *feed) Probe(db bun.IDB) *bun.SelectQuery { return f.r.probe(db, f.inFlight()) }

// Found implements idle.Feed: it wakes fill from waitIdle.
func (f *feed) Found() {
	select {
	case f.found <- struct{}{}:
	default:
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
