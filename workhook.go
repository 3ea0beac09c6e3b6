package bunqueue

import (
	"context"
	"fmt"
)

// HookWorkBegin is a lifecycle hook called before a handler or a job's
// worker runs, with the context it will get. Returning an error skips the
// handler: the item fails with that error, as if the handler had returned
// it.
type HookWorkBegin interface {
	WorkBegin(ctx context.Context, info *WorkInfo) error
}

// HookWorkEnd is a lifecycle hook called after a handler or a job's worker
// returned (or panicked), before its result is acted on. It gets the
// result (nil on success) and returns the result to act on: return err to
// observe only, or another error (or nil) to replace it.
type HookWorkEnd interface {
	WorkEnd(ctx context.Context, info *WorkInfo, err error) error
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

// hooks holds the lifecycle hooks that apply to one queue: the client's,
// then the queue's own.
type hooks struct {
	begin []HookWorkBegin
	end   []HookWorkEnd
}

// newHooks sorts hooks by the interfaces they implement; a value that
// implements none is an error naming where it was given.
func newHooks(where string, lists ...[]any) (hooks, error) {
	var h hooks
	for _, list := range lists {
		for i, x := range list {
			b, isBegin := x.(HookWorkBegin)
			e, isEnd := x.(HookWorkEnd)
			if !isBegin && !isEnd {
				return hooks{}, fmt.Errorf("bunqueue: %s[%d] (%T) implements neither HookWorkBegin nor HookWorkEnd", where, i, x)
			}
			if isBegin {
				h.begin = append(h.begin, b)
			}
			if isEnd {
				h.end = append(h.end, e)
			}
		}
	}
	return h, nil
}

// run calls the begin hooks, fn, and the end hooks. A panic in fn is
// turned into a *PanicError before the end hooks see it.
func (h hooks) run(ctx context.Context, info func() *WorkInfo, fn func() error) error {
	if len(h.begin) == 0 && len(h.end) == 0 {
		return callHandler(fn)
	}
	wi := info()
	var err error
	for _, b := range h.begin {
		if err = callHandler(func() error { return b.WorkBegin(ctx, wi) }); err != nil {
			break
		}
	}
	if err == nil {
		err = callHandler(fn)
	}
	for _, e := range h.end {
		err = callHandler(func() error { return e.WorkEnd(ctx, wi, err) })
	}
	return err
}
