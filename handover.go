package bunqueue

import (
	"strconv"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/limit"
)

// A job that Enqueue inserts through a *bun.DB or a bun.Conn has
// committed when Enqueue returns. If this client runs its queue, the job
// is handed to the queue's feed at once, so that a worker claims it by
// its key without waiting for a read of the queue (a round trip, and
// the wake-up of the goroutine that reads). The feed's next read finds it
// busy and passes over it. A job enqueued in a bun.Tx may never commit:
// the wake-up at its commit (QueryHook) makes the feed read it. A job
// due later, a duplicate, or a queue this client does not run go the
// usual way.

// handOverKey is the context key of the feed that an Enqueue hands its
// job to: the wake-up hook (QueryHook) does not wake that queue for the
// INSERT, whose job needs no read.
type handOverKey struct{}

// handOverFeed returns the feed that Enqueue hands the job of p over to
// once it is inserted through db, or nil: db may be a transaction, the
// job may be due later, or this client may not run its queue.
func (c *Client) handOverFeed(db bun.IDB, p EnqueueParams) *engine.Feed {
	switch db.(type) {
	case *bun.DB, bun.Conn:
	default:
		return nil // a transaction: its commit wakes the feed
	}
	queue := QueueDefault
	if o := p.Opts; o != nil {
		if !o.RunAt.IsZero() || o.Delay > 0 || o.Sequence != "" {
			return nil // due later, or perhaps blocked in its sequence
		}
		if o.Queue != "" {
			queue = o.Queue
		}
	}
	feeds := c.jobFeeds.Load()
	if feeds == nil {
		return nil // not started
	}
	select {
	case <-c.stopping:
		return nil // no worker takes it
	default:
	}
	return (*feeds)[queue]
}

// handOverJob hands f the job of p that Enqueue inserted, res. Its
// LimitKey is the job's slot key: a feed without a KeyLimit ignores it.
func handOverJob(f *engine.Feed, p EnqueueParams, res EnqueueResult) {
	if f == nil || res.Duplicate || res.ID == 0 {
		return
	}
	k := engine.Key{ID: "id=" + strconv.FormatInt(res.ID, 10), Vals: []any{res.ID}}
	if p.Opts != nil && p.Opts.LimitKey != "" {
		k.LimitKey = limit.SlotKey(p.Opts.LimitKey)
	}
	f.HandOver(k)
}
