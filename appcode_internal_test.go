package bunqueue

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker's pool runs the app's calls in goroutines that it keeps: a
// call that returns, fails or panics gives its goroutine back; one that
// calls runtime.Goexit ends it, and the next call gets another; a call
// made while another runs gets a goroutine of its own; stop ends them.
func TestAppPool(t *testing.T) {
	p := &appPool{}
	ctx := withAppPool(context.Background(), p)
	var first, again *int
	require.NoError(t, contain(ctx, func() error { v := 1; first = &v; return nil }))
	require.Len(t, p.idle, 1, "the goroutine is kept")
	g := p.idle[0]

	boom := errors.New("boom")
	require.ErrorIs(t, contain(ctx, func() error { return boom }), boom)
	var pe *PanicError
	require.ErrorAs(t, callApp(ctx, func() error { panic("a handler's panic") }), &pe)
	require.Equal(t, "a handler's panic", pe.Value)
	require.Equal(t, []*appGoroutine{g}, p.idle, "the same goroutine after an error and a panic")

	require.ErrorIs(t, contain(ctx, func() error { runtime.Goexit(); return nil }), ErrGoexit)
	require.Empty(t, p.idle, "a goroutine that Goexit ended is not kept")
	require.NoError(t, contain(ctx, func() error { v := 2; again = &v; return nil }))
	require.Len(t, p.idle, 1)
	require.NotSame(t, g, p.idle[0], "a new goroutine after Goexit")
	require.Equal(t, 1, *first)
	require.Equal(t, 2, *again)

	// A call inside a call: two goroutines, both kept.
	require.NoError(t, contain(ctx, func() error {
		return contain(ctx, func() error { return nil })
	}))
	require.Len(t, p.idle, 2)

	before := runtime.NumGoroutine()
	p.stop()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before-2; {
		require.True(t, time.Now().Before(deadline), "stop ends the pool's goroutines")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, contain(ctx, func() error { return nil }), "a call after stop still runs")
	require.Empty(t, p.idle, "and its goroutine ends")
}

// Without a pool in its context, contain runs the call in a goroutine of
// its own.
func TestContainWithoutPool(t *testing.T) {
	require.ErrorIs(t, contain(context.Background(), func() error { runtime.Goexit(); return nil }), ErrGoexit)
	var pe *PanicError
	require.ErrorAs(t, contain(context.Background(), func() error { panic(1) }), &pe)
}
