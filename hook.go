package bunqueue

import (
	"context"

	"github.com/bunqueue/bunqueue/internal/claim"
)

// Hook is a set of lifecycle hooks, called around every handler or job
// worker of the queues it is given to (Config.Hooks for every queue of a
// client, QueueConfig.Hooks and JobQueueConfig.Hooks for one queue): for
// logs, metrics or a kill switch. Either function may be nil. Like
// net/http/httptrace.ClientTrace it is a struct of functions, so that
// hooks for other moments can be added as fields without breaking the
// hooks written before them.
//
// The hooks of a queue run in order: the client's, then the queue's. The
// WorkBegin functions run until one returns an error; every WorkEnd runs,
// each given the result the one before it returned.
type Hook struct {
	// WorkBegin, if set, is called before a handler or a job's worker
	// runs, with the context it will get. Returning an error skips the
	// handler (and the WorkBegin functions after this one): the item
	// fails with that error, as if the handler had returned it.
	WorkBegin func(ctx context.Context, info *WorkInfo) error
	// WorkEnd, if set, is called after a handler or a job's worker
	// returned (or panicked), before its result is acted on. It gets the
	// result (nil on success) and returns the result to act on: err, to
	// observe only, or another error (or nil) to replace it.
	WorkEnd func(ctx context.Context, info *WorkInfo, err error) error
}

// WorkInfo describes the item a lifecycle hook is called for.
type WorkInfo struct {
	// Queue is the queue's name.
	Queue string
	// Key names the row by its primary key, such as "id=42".
	Key string
	// Keys is set instead of Key when a batch handler (NewBatchQueue) is
	// called for several rows at once: their keys, in order.
	Keys []string
	// JobID, Kind and Attempt are set for jobs of the jobs table.
	JobID   int64
	Kind    string
	Attempt int
}

// hooks are the lifecycle hooks that apply to one queue: the client's,
// then the queue's own.
type hooks []Hook

// newHooks joins lists in order, leaving out the hooks that set no
// function, so that a queue without hooks costs nothing per item.
func newHooks(lists ...[]Hook) hooks {
	var h hooks
	for _, list := range lists {
		for _, x := range list {
			if x.WorkBegin != nil || x.WorkEnd != nil {
				h = append(h, x)
			}
		}
	}
	return h
}

// run calls the WorkBegin hooks, fn, and the WorkEnd hooks, each through
// callApp: a panic, a runtime.Goexit or an error that cannot be read,
// in fn or in a hook, is turned into an error that the next hooks and the
// caller can read.
func (h hooks) run(ctx context.Context, info func() *WorkInfo, fn func() error) error {
	if len(h) == 0 {
		return callApp(ctx, fn)
	}
	wi := info()
	var err error
	for _, x := range h {
		if x.WorkBegin == nil {
			continue
		}
		if err = callApp(ctx, func() error { return x.WorkBegin(ctx, wi) }); err != nil {
			break
		}
	}
	if err == nil {
		err = callApp(ctx, fn)
	}
	for _, x := range h {
		if x.WorkEnd != nil {
			err = callApp(ctx, func() error { return x.WorkEnd(ctx, wi, err) })
		}
	}
	return err
}

// around returns h as the claims of queue call it (claim.Queue.Hooks).
func (h hooks) around(queue string) func(ctx context.Context, info func() claim.Info, fn func() error) error {
	return func(ctx context.Context, info func() claim.Info, fn func() error) error {
		return h.run(ctx, func() *WorkInfo {
			i := info()
			return &WorkInfo{Queue: queue, Key: i.Key, Keys: i.Keys}
		}, fn)
	}
}
