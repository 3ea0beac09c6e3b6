package bunqueue

import (
	"context"

	"github.com/bunqueue/bunqueue/internal/apppool"
)

// The library calls the app's code from goroutines of its own, contained
// by internal/apppool: whatever that code does, it fails its item or its
// batch, never the process, nor the worker that called it.

// appPool keeps the goroutines that one worker runs the app's code in.
type appPool = apppool.Pool

// withAppPool returns ctx carrying p, for contain.
func withAppPool(ctx context.Context, p *appPool) context.Context { return apppool.With(ctx, p) }

// appErrors are what the app's code that did not return comes back as: a
// panic as a *PanicError, a call of runtime.Goexit as ErrGoexit.
func appErrors() apppool.Errors {
	return apppool.Errors{
		Panic:  func(v any, stack []byte) error { return &PanicError{Value: v, Stack: stack} },
		Goexit: ErrGoexit,
	}
}

// callApp runs fn, the app's code for one item (a handler, a worker,
// a lifecycle hook, OnError), and returns its error in a form the library
// can read (see apppool.Call).
func callApp(ctx context.Context, fn func() error) error {
	return apppool.Call(ctx, fn, appErrors())
}

// contain runs fn in another goroutine and waits for it, so that the
// calling goroutine survives whatever fn does (see apppool.Contain).
func contain(ctx context.Context, fn func() error) error {
	return apppool.Contain(ctx, fn, appErrors())
}
