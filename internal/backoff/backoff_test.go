package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{7, time.Minute}, {100, time.Minute},
	} {
		require.Equal(t, tc.want, Exponential(tc.attempt, time.Second, time.Minute), "attempt %d", tc.attempt)
	}
}

func TestJitterAndBetween(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := Jitter(time.Second, 0.2)
		require.GreaterOrEqual(t, d, 800*time.Millisecond)
		require.LessOrEqual(t, d, 1200*time.Millisecond)
		seen[d] = true
		b := Between(10*time.Millisecond, 20*time.Millisecond)
		require.GreaterOrEqual(t, b, 10*time.Millisecond)
		require.LessOrEqual(t, b, 20*time.Millisecond)
	}
	require.Greater(t, len(seen), 100, "jitter must vary")
	require.Equal(t, time.Second, Jitter(time.Second, 0))
	require.Equal(t, 5*time.Millisecond, Between(5*time.Millisecond, time.Millisecond))
}
