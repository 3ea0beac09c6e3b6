package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
)

// The Limits column says each limit in words, the key by its column on a
// table queue and as the limit key on a jobs queue.
func TestLimitsLabel(t *testing.T) {
	t.Parallel()
	table := bunqueue.QueueStats{Kind: bunqueue.QueueKindTable, GlobalLimit: 4, KeyLimit: 1, KeyColumn: "customer_id",
		RateLimit: bunqueue.Rate{N: 50, Per: time.Second}, KeyRate: bunqueue.Rate{N: 3, Per: 10 * time.Second}}
	require.Equal(t, "4 at once; 1 at once per customer_id; 50 per second; 3 per 10s per customer_id", limitsLabel(table))
	jobs := bunqueue.QueueStats{Kind: bunqueue.QueueKindJobs, KeyLimit: 2, KeyColumn: "limit_key", RateLimit: bunqueue.Rate{N: 7, Per: time.Hour}}
	require.Equal(t, "2 at once per limit key; 7 per hour", limitsLabel(jobs))
	require.Equal(t, "none", limitsLabel(bunqueue.QueueStats{Kind: bunqueue.QueueKindTable}))
}
