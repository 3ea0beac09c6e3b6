package bunqueue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/batchsize"
)

// work is one worker: it takes rows from the queue's feed and processes
// them, a batch per transaction, until the client stops.
func (c *Client) work(ctx context.Context, r *runner, f *feed) {
	defer c.workers.Done()
	ctx = workerContext(ctx, r) // its own writes do not wake its queue: see QueryHook
	apps := &appPool{}          // the goroutines its batches and handlers run in
	defer apps.Stop()
	ctx = withAppPool(ctx, apps)
	w := &worker{c: c, r: r, f: f, s: newSession(c.claimDB, c.dialect), log: c.cfg.Logger.With("queue", r.name), size: batchsize.Fixed(r.batch),
		wake: make(chan struct{}, 1)}
	if r.selfSized {
		w.size = batchsize.New(r.batch, BatchTarget)
	}
	defer w.s.End()
	for {
		select {
		case <-c.stopping:
			return
		default:
		}
		keys := f.take(w.size.Size(), w.wake)
		if keys == nil {
			if !w.await() {
				return
			}
			continue
		}
		res := w.process(ctx, keys)
		switch {
		case res.err == nil:
			w.failures = 0
		case errors.Is(res.err, errLimited):
			if !w.awaitLimit(res.err) {
				return
			}
		case ctx.Err() != nil:
			return // Stop cancelled the batch
		case !w.backOff(ctx, res.err):
			return
		}
	}
}

// worker is the state of one worker goroutine of a queue (see
// Client.work): its session, the size of its next batch and how many
// batches in a row failed.
type worker struct {
	c        *Client
	r        *runner
	f        *feed
	s        *session
	log      *slog.Logger
	size     *batchsize.Sizer // how many rows to take for the next batch
	failures int              // batches failed in a row
	wake     chan struct{}    // cap 1: the feed's signal that rows came (see feed.take)
}

// await waits until the feed signals that rows came or the client
// stops, and reports whether it did not stop. It keeps the session's
// connection while work comes, not longer: after the queue's poll
// interval it ends the session, then goes on waiting.
func (w *worker) await() bool {
	var idle <-chan time.Time
	t := time.NewTimer(w.r.poll)
	defer t.Stop()
	if w.s.HasConn() {
		idle = t.C
	}
	select {
	case <-w.c.stopping:
		return false
	case <-w.wake:
	case <-idle:
		w.s.End()
	}
	return true
}

// process claims and processes the rows of keys in one transaction,
// hands the result back to the feed, resizes a self-sized batch and logs
// the rows' failures.
func (w *worker) process(ctx context.Context, keys []feedKey) batchResult {
	asked := w.size.Size()
	res := w.c.counts.running(w.r.name, len(keys), func() batchResult { return w.r.runBatch(ctx, w.s, w.r.batch, keys) }) // in flight, for Stats
	if res.err != nil && ctx.Err() != nil {
		// Stop cancelled the batch. The driver may close the connection
		// lazily, and the server notice later: end the server session
		// now, so that the batch's locks are gone when Stop returns.
		w.c.endSession(ctx, w.s)
	}
	if !errors.Is(res.err, errLimited) {
		w.s.Failed(res.err) // a batch that found no slot keeps its session
	}
	tried, untried := splitUntried(keys, res)
	w.f.putBack(untried)
	w.f.finish(tried, res)
	w.f.done(keys)
	switch {
	case res.leftOut > 0:
		// Rows of full keys were left out: a smaller batch holds fewer
		// keys' slots, for less time, so more workers find keys free.
		w.size.Contended()
	case res.err == nil:
		w.size.Done(asked, len(keys), res.work)
	}
	for _, err := range res.itemErrs {
		logItemError(ctx, w.log, err) // faillog.go: a job's line says what became of it
	}
	return res
}

// backOff logs a failed batch and waits, longer after each failure in a
// row, before the worker tries again; it reports whether the client did
// not stop meanwhile.
func (w *worker) backOff(ctx context.Context, err error) bool {
	w.failures++
	wait := backoff.Jitter(backoff.Exponential(w.failures, 100*time.Millisecond, max(w.r.poll, 5*time.Second)), 0.2)
	w.log.ErrorContext(ctx, "bunqueue: batch failed", "error", err, "retry_in", wait)
	return w.pause(wait)
}

// pause waits for d, and reports whether the client did not stop
// meanwhile.
func (w *worker) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.c.stopping:
		return false
	case <-t.C:
		return true
	}
}
