package apppool

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// panicError and errGoexit stand for the root's *PanicError and
// ErrGoexit.
type panicError struct{ value any }

func (e *panicError) Error() string { return "panicked" }

var errGoexit = errors.New("goexit")

var errs = Errors{
	Panic:  func(v any, _ []byte) error { return &panicError{value: v} },
	Goexit: errGoexit,
}

// A worker's pool runs the app's calls in goroutines that it keeps: a
// call that returns, fails or panics gives its goroutine back; one that
// calls runtime.Goexit ends it, and the next call gets another; a call
// made while another runs gets a goroutine of its own; stop ends them.
func TestPool(t *testing.T) {
	p := &Pool{}
	ctx := With(context.Background(), p)
	var first, again *int
	require.NoError(t, Contain(ctx, func() error { v := 1; first = &v; return nil }, errs))
	require.Len(t, p.idle, 1, "the goroutine is kept")
	g := p.idle[0]

	boom := errors.New("boom")
	require.ErrorIs(t, Contain(ctx, func() error { return boom }, errs), boom)
	var pe *panicError
	require.ErrorAs(t, Call(ctx, func() error { panic("a handler's panic") }, errs), &pe)
	require.Equal(t, "a handler's panic", pe.value)
	require.Equal(t, []*goroutine{g}, p.idle, "the same goroutine after an error and a panic")

	require.ErrorIs(t, Contain(ctx, func() error { runtime.Goexit(); return nil }, errs), errGoexit)
	require.Empty(t, p.idle, "a goroutine that Goexit ended is not kept")
	require.NoError(t, Contain(ctx, func() error { v := 2; again = &v; return nil }, errs))
	require.Len(t, p.idle, 1)
	require.NotSame(t, g, p.idle[0], "a new goroutine after Goexit")
	require.Equal(t, 1, *first)
	require.Equal(t, 2, *again)

	// A call inside a call: two goroutines, both kept.
	require.NoError(t, Contain(ctx, func() error {
		return Contain(ctx, func() error { return nil }, errs)
	}, errs))
	require.Len(t, p.idle, 2)

	before := runtime.NumGoroutine()
	p.Stop()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before-2; {
		require.True(t, time.Now().Before(deadline), "stop ends the pool's goroutines")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, Contain(ctx, func() error { return nil }, errs), "a call after stop still runs")
	require.Empty(t, p.idle, "and its goroutine ends")
}

// Without a pool in its context, Contain runs the call in a goroutine of
// its own.
func TestContainWithoutPool(t *testing.T) {
	require.ErrorIs(t, Contain(context.Background(), func() error { runtime.Goexit(); return nil }, errs), errGoexit)
	var pe *panicError
	require.ErrorAs(t, Contain(context.Background(), func() error { panic(1) }, errs), &pe)
}
