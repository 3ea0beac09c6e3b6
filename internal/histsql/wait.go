package histsql

import (
	"fmt"
	"math"
	"time"
)

// WaitBuckets is how many buckets the history's histogram of waits
// before start has, one column each (w00 to w23), with fixed bounds, so
// that the histograms of every process add up bucket by bucket: bucket 0
// holds the waits under a millisecond, bucket i from 1 to 22 those from
// 2^(i-1) up to 2^i milliseconds, and bucket 23 every wait from 2^22 ms
// (about 70 minutes) on.
const WaitBuckets = 24

// WaitColumn is the history table's column of wait bucket i.
func WaitColumn(i int) string { return fmt.Sprintf("w%02d", i) }

// WaitBucket returns the bucket of the wait d.
func WaitBucket(d time.Duration) int {
	if d < time.Millisecond {
		return 0
	}
	ms := float64(d) / float64(time.Millisecond)
	return min(WaitBuckets-1, 1+int(math.Floor(math.Log2(ms))))
}

// WaitBucketTop returns the upper bound of bucket i, 2^i ms; the last
// bucket has none, and returns its lower bound.
func WaitBucketTop(i int) time.Duration {
	return time.Duration(math.Exp2(float64(min(i, WaitBuckets-2)))) * time.Millisecond
}

// WaitQuantile returns the wait that a fraction p (0 < p <= 1) of the
// waits counted in buckets are at most: the top of the bucket that holds
// it, so at most twice the true figure, and never above longest. Zero
// with no wait.
func WaitQuantile(buckets *[WaitBuckets]int64, longest time.Duration, p float64) time.Duration {
	var n int64
	for _, c := range buckets {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p * float64(n)))
	var seen int64
	for i, c := range buckets {
		if seen += c; seen >= rank && c > 0 {
			return min(WaitBucketTop(i), longest)
		}
	}
	return longest
}
