package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A job whose lease the heartbeat finds taken over is cancelled while it
// runs and reported lost; a failed heartbeat is reported. (A heartbeat
// that comes late cancels the running job too, and Finish reports its
// lease gone either way: the assertions hold on a slow machine.)
func TestKeeperCancelsALostJob(t *testing.T) {
	var warned atomic.Int32
	extend := func(ctx context.Context, ids []int64) ([]int64, error) {
		if warned.Load() == 0 && len(ids) == 1 {
			return nil, errors.New("server gone")
		}
		return []int64{1}, nil // job 2's lease was taken over
	}
	k := New([]int64{1, 2}, 900*time.Millisecond, time.Now(), extend, func(context.Context, error) { warned.Add(1) })
	go k.Run(context.Background())
	defer k.Stop()

	var cancelled atomic.Bool
	if !k.Start(2, func() { cancelled.Store(true) }) {
		t.Skip("the machine stalled past the lease before the job started")
	}
	require.Eventually(t, cancelled.Load, 10*time.Second, 10*time.Millisecond, "the running job whose lease was lost")
	require.True(t, k.Finish(2), "its lease is known lost")
	require.Eventually(t, func() bool { return warned.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"a heartbeat that failed is reported")
}

// Margin leaves room for a pause of the process: a tenth of the lease,
// at least 200 ms.
func TestMargin(t *testing.T) {
	require.Equal(t, 200*time.Millisecond, Margin(time.Second))
	require.Equal(t, 3*time.Second, Margin(30*time.Second))
}
