// Package backoff computes waits: exponential growth with a cap, and jitter.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential returns base·2^(attempt−1), capped at max. Attempt 1 (or
// less) gives base.
func Exponential(attempt int, base, max time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= max || d <= 0 {
			return max
		}
	}
	if d > max {
		return max
	}
	return d
}

// Jitter returns d scaled by a random factor in [1−frac, 1+frac].
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	f := 1 - frac + 2*frac*rand.Float64()
	return time.Duration(float64(d) * f)
}

// Between returns a random duration in [lo, hi].
func Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
}

// Sleep waits d or until ctx ends; it reports whether the full wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
