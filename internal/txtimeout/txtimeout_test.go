package txtimeout

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call that fails after its timeout is a *LostError only when its
// transaction is gone; one that fails for itself keeps its error.
func TestCall(t *testing.T) {
	ctx := context.Background()
	gone := func(context.Context) bool { return true }
	kept := func(context.Context) bool { return false }
	waits := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	swallows := func(ctx context.Context) error { <-ctx.Done(); return nil }
	boom := errors.New("boom")

	var lost *LostError
	require.ErrorAs(t, Call(ctx, time.Millisecond, gone, waits), &lost)
	require.ErrorIs(t, lost, context.DeadlineExceeded)
	require.ErrorAs(t, Call(ctx, time.Millisecond, gone, swallows), &lost, "nil after the timeout, but the transaction is gone")

	err := Call(ctx, time.Millisecond, kept, waits)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, errors.As(err, &lost))
	require.NoError(t, Call(ctx, time.Millisecond, kept, swallows))
	require.ErrorIs(t, Call(ctx, 0, gone, func(context.Context) error { return boom }), boom)
	require.False(t, errors.As(Call(ctx, time.Hour, gone, func(context.Context) error { return boom }), &lost),
		"its context did not end: its statements ran whole")
}
