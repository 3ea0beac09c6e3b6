package bunqueue

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// The library calls the app's code from goroutines of its own: handlers,
// workers, lifecycle hooks, OnError, Backoff, and, inside the claims and
// the feed's reads, the queue's query function and the model's scanners.
// Whatever that code does (panic, call runtime.Goexit, return an error
// that cannot be read), it must fail its item or its batch, never the
// process, nor the worker that called it.

// callApp runs fn, the app's code for one item (a handler, a worker,
// a lifecycle hook, OnError), and returns its error in a form the library
// can read: see contain and readable.
func callApp(fn func() error) error {
	return contain(func() error { return readable(fn()) })
}

// contain runs fn in a goroutine of its own and waits for it, so that the
// calling goroutine survives whatever fn does: a panic comes back as a
// *PanicError, a call of runtime.Goexit as ErrGoexit.
func contain(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if r := recover(); r != nil {
				done <- readable(&PanicError{Value: r, Stack: debug.Stack()})
			} else if !returned {
				done <- ErrGoexit
			}
		}()
		err := fn()
		returned = true
		done <- err
	}()
	return <-done
}

// readable returns err if the library can read it, or a *PanicError that
// says what could not be read. The library reads an item's error (its
// message, and its chain through errors.Is and errors.As) for spans,
// metrics, logs and the failed jobs; a method that panics there, as the
// Error method of a typed nil pointer often does, would otherwise crash
// the process from a worker's goroutine.
func readable(err error) (safe error) {
	if err == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			safe = &PanicError{
				Value: fmt.Errorf("the %T it returned as its error cannot be read (a nil pointer?): %v", err, r),
				Stack: debug.Stack(),
			}
		}
	}()
	_ = err.Error()
	_ = errors.Is(err, errUnmatched)
	_ = errors.As(err, new(*unmatched))
	return err
}

// errUnmatched and unmatched are what no error is: errors.Is and errors.As
// walk an error's whole chain looking for them.
var errUnmatched = errors.New("bunqueue: no error is this one")

type unmatched struct{ error }
