package bunqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/bunqueue/bunqueue/internal/histsql"
)

// FleetHistoryMinutes and FleetHistoryQuarters are how many points
// Client.FleetHistory returns: the last hour by the minute, and the last
// day by the quarter hour.
const (
	FleetHistoryMinutes  = 60
	FleetHistoryQuarters = 96
)

// FleetWaitBuckets is how many buckets a FleetPoint's histogram of waits
// before start has, with fixed bounds, the same in every process:
// bucket 0 counts the waits under a millisecond, bucket i from 1 to 22
// those from 2^(i-1) up to 2^i milliseconds (FleetWaitBucketTop), and
// bucket 23 every wait from 2^22 ms, about 70 minutes, on.
const FleetWaitBuckets = histsql.WaitBuckets

// FleetWaitBucketTop returns the upper bound of the wait bucket i,
// 2^i ms (for the last bucket, which has none, its lower bound).
func FleetWaitBucketTop(i int) time.Duration { return histsql.WaitBucketTop(i) }

// FleetHistory is the whole fleet's history of a queue, or of every
// queue: what the processes of every app server that run on the client's
// tables (Config.Tables) counted, added up, as Client.FleetHistory
// returns it.
type FleetHistory struct {
	// Queue is the queue's name; "" for every queue, summed.
	Queue string `json:"queue"`
	// Minutes are the last FleetHistoryMinutes minutes, oldest first; the
	// last is the database clock's current minute, still counting.
	Minutes []FleetPoint `json:"minutes"`
	// Quarters are the last FleetHistoryQuarters quarter hours, oldest
	// first; the last is the current one, still counting.
	Quarters []FleetPoint `json:"quarters"`
}

// FleetPoint is what the fleet counted over one minute or quarter hour.
// Each process adds its counts to the database with its heartbeat, so a
// count lands in the minute of the database clock in which the heartbeat
// after it ran, at most a HeartbeatInterval later.
type FleetPoint struct {
	// At is when the minute or quarter hour began, by the database clock,
	// in UTC.
	At time.Time `json:"at"`
	// Processed and Failed count the rows and jobs that the fleet's
	// workers completed and failed, as QueueStats' figures count them in
	// one process.
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	// Started counts the jobs of jobs queues that the fleet's workers
	// started, each attempt once (see QueueHistory.Started).
	Started int64 `json:"started"`
	// Waits counts the started jobs by their wait before start (see
	// QueueHistory.WaitP50), in FleetWaitBuckets buckets: the processes'
	// histograms, added bucket by bucket. Its sum is Started.
	Waits []int64 `json:"waits"`
	// WaitP50 and WaitP95 are the median and 95th percentile of the
	// waits, read from Waits: each the top of its bucket, at most twice
	// the true figure, and never above WaitMax, the longest wait. Zero
	// with no start. In JSON, nanoseconds.
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP95 time.Duration `json:"wait_p95_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	// Depth is the queue's depth as the process that holds the upkeep's
	// lease sampled it, once a minute, the largest sample of the minute
	// or quarter hour (of every queue: the sum of each queue's); -1 where
	// no sample was taken.
	Depth int64 `json:"depth"`
}

// FleetHistory returns the whole fleet's history of the queue named
// queue ("" for every queue, summed): per minute over the last hour, and
// per quarter hour over the last day, read from the history table that
// every started client of the client's tables adds to. Every process
// reads the same figures from it. It needs schema version 12 (Migrate):
// its error wraps ErrNotMigrated without it.
func (c *Client) FleetHistory(ctx context.Context, queue string) (FleetHistory, error) {
	h := c.histSQL()
	now, err := h.Now(ctx, c.db)
	if err != nil {
		return FleetHistory{}, fmt.Errorf("bunqueue: fleet history: %w", err)
	}
	minutes, quarters := historyFrom(now)
	rows, err := h.List(ctx, c.db, queue, min(minutes, quarters))
	if err != nil {
		return FleetHistory{}, fmt.Errorf("bunqueue: fleet history: %w", c.notMigrated(err))
	}
	mins := newFleetSeries(minutes, histsql.Minute, FleetHistoryMinutes)
	qs := newFleetSeries(quarters, histsql.Quarter, FleetHistoryQuarters)
	for i := range rows {
		if r := &rows[i]; r.Res == histsql.Minute {
			mins.add(r)
		}
		qs.add(&rows[i]) // a minute row not yet rolled up counts in its quarter
	}
	return FleetHistory{Queue: queue, Minutes: mins.points(), Quarters: qs.points()}, nil
}
