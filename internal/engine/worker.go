package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/bunqueue/bunqueue/internal/apppool"
	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/batchsize"
	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/limit"
)

// Work is one worker of f's queue: it takes rows from the feed and
// processes them, a batch per transaction, until the client stops.
func (e *Env) Work(ctx context.Context, f *Feed) {
	r := f.r
	ctx = workerContext(ctx, r) // its own writes do not wake its queue: see WorkerOf
	apps := &apppool.Pool{}     // the goroutines its batches and handlers run in
	defer apps.Stop()
	ctx = apppool.With(ctx, apps)
	w := &worker{e: e, r: r, f: f, s: claimconn.New(e.ClaimDB, e.Dialect), log: e.Logger.With("queue", r.Name), size: batchsize.Fixed(r.Batch),
		wake: make(chan struct{}, 1)}
	if r.SelfSized {
		w.size = batchsize.New(r.Batch, e.BatchTarget)
	}
	defer w.s.End()
	for {
		select {
		case <-e.Stopping:
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
		case res.Err == nil:
			w.failures = 0
		case errors.Is(res.Err, limit.ErrLimited):
			if !w.awaitLimit(res.Err) {
				return
			}
		case ctx.Err() != nil:
			return // Stop cancelled the batch
		case !w.backOff(ctx, res.Err):
			return
		}
	}
}

// worker is the state of one worker goroutine of a queue (see
// Env.Work): its session, the size of its next batch and how many
// batches in a row failed.
type worker struct {
	e        *Env
	r        *Queue
	f        *Feed
	s        *claimconn.Session
	log      *slog.Logger
	size     *batchsize.Sizer // how many rows to take for the next batch
	failures int              // batches failed in a row
	wake     chan struct{}    // cap 1: the feed's signal that rows came (see Feed.take)
}

// await waits until the feed signals that rows came or the client
// stops, and reports whether it did not stop. It keeps the session's
// connection while work comes, not longer: after the queue's poll
// interval it ends the session, then goes on waiting.
func (w *worker) await() bool {
	var idle <-chan time.Time
	t := time.NewTimer(w.r.Poll)
	defer t.Stop()
	if w.s.HasConn() {
		idle = t.C
	}
	select {
	case <-w.e.Stopping:
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
func (w *worker) process(ctx context.Context, keys []Key) Result {
	asked := w.size.Size()
	res := w.e.Running(w.r.Name, len(keys), func() Result { return w.r.RunBatch(ctx, w.s, w.r.Batch, keys) }) // in flight, for Stats
	if res.Err != nil && ctx.Err() != nil {
		// Stop cancelled the batch. The driver may close the connection
		// lazily, and the server notice later: end the server session
		// now, so that the batch's locks are gone when Stop returns.
		w.e.EndSession(ctx, w.s)
	}
	if !errors.Is(res.Err, limit.ErrLimited) {
		w.s.Failed(res.Err) // a batch that found no slot keeps its session
	}
	tried, untried := splitUntried(keys, res)
	w.f.putBack(untried)
	w.f.finish(tried, res)
	w.f.done(keys)
	switch {
	case res.LeftOut > 0:
		// Rows of full keys were left out: a smaller batch holds fewer
		// keys' slots, for less time, so more workers find keys free.
		w.size.Contended()
	case res.Err == nil:
		w.size.Done(asked, len(keys), res.Work)
	}
	for _, err := range res.ItemErrs {
		w.e.LogItemError(ctx, w.log, err)
	}
	return res
}

// backOff logs a failed batch and waits, longer after each failure in a
// row, before the worker tries again; it reports whether the client did
// not stop meanwhile.
func (w *worker) backOff(ctx context.Context, err error) bool {
	w.failures++
	wait := backoff.Jitter(backoff.Exponential(w.failures, 100*time.Millisecond, max(w.r.Poll, 5*time.Second)), 0.2)
	w.log.ErrorContext(ctx, "bunqueue: batch failed", "error", err, "retry_in", wait)
	return w.pause(wait)
}

// pause waits for d, and reports whether the client did not stop
// meanwhile.
func (w *worker) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.e.Stopping:
		return false
	case <-t.C:
		return true
	}
}

// awaitLimit waits, after a batch that found no free slot of a limit,
// before the worker looks again (see limit.Wait). It reports whether the
// client did not stop meanwhile.
func (w *worker) awaitLimit(err error) bool {
	return w.pause(limit.Wait(err, w.r.Poll))
}

// splitUntried splits the rows of a batch into those it tried to claim
// and those it did not, for want of a RateLimit's slot: all of them if it
// found none.
func splitUntried(keys []Key, res Result) (tried, untried []Key) {
	if errors.As(res.Err, new(*limit.RateWait)) {
		return nil, keys
	}
	if len(res.Untried) == 0 {
		return keys, nil
	}
	for _, k := range keys {
		if slices.Contains(res.Untried, k.ID) {
			untried = append(untried, k)
		} else {
			tried = append(tried, k)
		}
	}
	return tried, untried
}
