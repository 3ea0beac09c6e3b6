package engine

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/claimconn"
)

// Fill reads waiting rows into ready whenever the workers run short.
// After a read that found nothing new it waits for the client's idle
// watcher, which probes all the idle queues at once, or for a wake-up
// (see waitIdle). It is the only goroutine that reads the queue.
func (e *Env) Fill(ctx context.Context, f *Feed) {
	r := f.r
	log := e.Logger.With("queue", r.Name)
	rd := &reader{db: e.DB, setup: e.Dialect.ReadSetup(), contain: e.Contain}
	defer rd.end()
	failures := 0
	for {
		select {
		case <-e.Stopping:
			return
		default:
		}
		if !e.waitResumed(f, rd) {
			return
		}
		found, err := rd.fetch(ctx, r, f.begin())
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait := backoff.Jitter(backoff.Exponential(failures, 100*time.Millisecond, max(r.Poll, 5*time.Second)), 0.2)
			log.ErrorContext(ctx, "bunqueue: reading the queue failed", "error", err, "retry_in", wait)
			t := time.NewTimer(wait)
			select {
			case <-e.Stopping:
				t.Stop()
				return
			case <-r.Wake:
				f.release()
			case <-t.C:
			}
			t.Stop()
		case f.add(found) > 0:
			failures = 0
			// Wait until the workers run short of rows.
			select {
			case <-e.Stopping:
				return
			case <-f.low:
			}
			continue
		case r.Gate.Paused():
			failures = 0 // paused during the read: wait for the resume
			continue
		default:
			failures = 0
			// Nothing new: rows come back at a wake-up (a commit in this
			// process) or are found by the idle watcher.
			if !e.waitIdle(f, rd) {
				return
			}
		}
		// Requests that came while nothing was there are answered by
		// this read.
		select {
		case <-f.low:
		default:
		}
	}
}

// waitResumed waits while the feed's queue is paused, without its read
// connection; false if the client stops first.
func (e *Env) waitResumed(f *Feed, rd *reader) bool {
	resumed := f.r.Gate.wait()
	select {
	case <-resumed:
		return true
	default:
	}
	rd.end()
	select {
	case <-e.Stopping:
		return false
	case <-resumed:
		return true
	}
}

// A reader is a feed's connection for its reads, when the dialect has a
// ReadSetup: a connection of its own, set up once and never handed back
// to the pool with that setting. Without one, reads go to the pool.
type reader struct {
	db    *bun.DB
	setup string
	conn  *bun.Conn // nil: none yet, or discarded
	// contain runs the read (see Env.Contain).
	contain func(ctx context.Context, fn func() error) error
}

// fetch runs r's read on the reader's connection. A connection the server
// closed while the queue was idle (wait_timeout) is replaced once.
func (rd *reader) fetch(ctx context.Context, r *Queue, limit int) ([]Key, error) {
	if rd.setup == "" {
		return rd.read(ctx, r, rd.db, limit)
	}
	for attempt := 1; ; attempt++ {
		if rd.conn == nil {
			conn, err := rd.db.Conn(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := conn.ExecContext(ctx, rd.setup); err != nil {
				claimconn.Discard(&conn)
				return nil, fmt.Errorf("set up the read's connection: %w", err)
			}
			rd.conn = &conn
		}
		found, err := rd.read(ctx, r, rd.conn, limit)
		if err != nil {
			// Its state is unknown: a new read starts on a new connection.
			rd.end()
			if errors.Is(err, driver.ErrBadConn) && attempt == 1 && ctx.Err() == nil {
				continue
			}
		}
		return found, err
	}
}

// read runs r's read on db, contained (see Env.Contain): the read runs the
// queue's query function, the app's code, and a panic there fails it.
func (rd *reader) read(ctx context.Context, r *Queue, db bun.IDB, limit int) ([]Key, error) {
	var found []Key
	err := rd.contain(ctx, func() (err error) {
		found, err = r.Fetch(ctx, db, limit)
		return err
	})
	return found, err
}

// end closes the reader's connection, out of the pool.
func (rd *reader) end() {
	if rd.conn != nil {
		claimconn.Discard(rd.conn)
		rd.conn = nil
	}
}

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

// waitIdle waits, after a read that found nothing new, until the idle
// watcher finds rows in the queue or a commit in this process wakes it;
// false if the client stops first. A poll interval without either lets
// the feed's connection go, as the workers let theirs.
func (e *Env) waitIdle(f *Feed, rd *reader) bool {
	select {
	case <-f.found: // from a probe that ran while it was leaving
	default:
	}
	e.Idle.Add(f)
	defer e.Idle.Remove(f)
	drop := time.NewTimer(f.r.Poll)
	defer drop.Stop()
	for {
		select {
		case <-e.Stopping:
			return false
		case <-f.r.Wake:
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
func (f *Feed) Poll() time.Duration { return f.r.Poll }

// Probe implements idle.Feed: the queue's read of one row that is
// neither cooling down nor in flight.
func (f *Feed) Probe(db bun.IDB) *bun.SelectQuery { return f.r.Probe(db, f.inFlight()) }

// Found implements idle.Feed: it wakes fill from waitIdle.
func (f *Feed) Found() {
	select {
	case f.found <- struct{}{}:
	default:
	}
}
