// Package txtimeout runs a handler call under its queue's Timeout, and
// tells when the timeout took the call's transaction with it. It calls
// only the standard library; whether a transaction still answers is
// asked of the caller.
package txtimeout

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LostError is a handler's error after which its transaction is gone:
// a statement cut short by the end of the handler's context (its Timeout)
// closes the connection, and the server may run the statement on, holding
// the transaction's locks, until it finishes. The claim's writes can then
// not be committed, nor the failure recorded in it.
type LostError struct{ Err error }

// Error implements error.
func (e *LostError) Error() string {
	return e.Err.Error() + " (its transaction was lost with its connection)"
}

// Unwrap returns the handler's error.
func (e *LostError) Unwrap() error { return e.Err }

// Call runs a handler call, fn, with timeout on its context (none when
// timeout is zero). When the call fails after its context ended, it asks
// lost whether the call's transaction is gone, and returns a *LostError
// if it is.
func Call(ctx context.Context, timeout time.Duration, lost func(ctx context.Context) bool, fn func(ctx context.Context) error) error {
	hctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 { // no context per item without one
		hctx, cancel = context.WithTimeout(ctx, timeout)
	}
	err := fn(hctx)
	timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if ctx.Err() != nil || err == nil && !timedOut {
		return err
	}
	if err == nil {
		// It returned nil after its Timeout: it succeeded, unless a
		// statement the timeout cut short (an error the handler
		// swallowed) took its transaction down, and its work with it.
		if lost(ctx) {
			return &LostError{Err: fmt.Errorf("timed out after %s: %w; the handler returned nil", timeout, context.DeadlineExceeded)}
		}
		return nil
	}
	if timedOut {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	if !timedOut && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err // the handler's context did not end: its statements ran whole
	}
	if lost(ctx) {
		return &LostError{Err: err}
	}
	return err
}
