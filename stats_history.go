package bunqueue

import (
	"context"
	"time"
)

// HistoryMinutes is how many minutes Client.History returns: the last
// hour, a minute a slot.
const HistoryMinutes = 60

// QueueHistory is what Client.History tells of one queue: the rows and
// jobs this process's workers completed and failed in each of the last
// HistoryMinutes minutes, oldest first, the counts behind
// QueueStats.ProcessedLastHour and FailedLastHour; and, for a jobs queue,
// the jobs they started in each minute and how long those had waited.
type QueueHistory struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	// From is when the first minute began, in UTC, on a whole minute. The
	// last minute, From + 59 minutes, is the current one, still counting.
	From time.Time `json:"from"`
	// Processed and Failed count, for each minute, what QueueStats'
	// ProcessedLastHour and FailedLastHour count over the hour: their
	// sums are those figures, read at the same time.
	Processed []int64 `json:"processed"`
	Failed    []int64 `json:"failed"`
	// Started counts, for each minute, the jobs of a jobs queue that this
	// process's workers started (each attempt counts, in both modes): the
	// jobs behind the minute's waits. It is zero for a queue over an
	// app's table, whose rows have no time at which they became due that
	// bunqueue knows, and tells a minute with no start from one of waits
	// under a millisecond.
	Started []int64 `json:"started"`
	// WaitP50, WaitP95 and WaitMax are, for each minute, how long the jobs
	// started in it had been due when their worker started them: the
	// median, the 95th percentile and the longest. A job is due at its
	// run_at: when it was enqueued, or the time it was scheduled for, or,
	// for a retry or a snooze, the end of its backoff; for a job whose
	// lease ran out, the lease's end. The wait is read on the database
	// clock by the claim, plus the time from the claim to the start on
	// this process's clock, so that a clock skew between the app servers
	// and the database does not enter it. It includes any time the job
	// waited for a worker, a limit or a paused queue. The percentiles come
	// from a histogram of buckets 19% wide: each is the top of its bucket,
	// at most 19% above the true figure, and never above WaitMax. Zero in
	// a minute with no start (see Started). In JSON, nanoseconds.
	WaitP50 []time.Duration `json:"wait_p50_ns"`
	WaitP95 []time.Duration `json:"wait_p95_ns"`
	WaitMax []time.Duration `json:"wait_max_ns"`
}

// History returns the per-minute counts of the queue named queue over the
// last hour, as this process counted them since NewClient (zeros for a
// queue it did not run, or that has no such name). It only reads memory.
func (c *Client) History(queue string) QueueHistory {
	return QueueHistory(c.counts.History(queue, time.Now()))
}

// startedJob counts, for Client.History, the fleet's history and the
// bunqueue.job.wait histogram, the start of the job of row, now, with its wait before
// start.
func (c *Client) startedJob(ctx context.Context, row *jobRow) {
	if d, ok := row.Waited(); ok {
		c.counts.Started(row.Queue, d, time.Now())
		c.counts.pending.Started(row.Queue, d)
		c.tel.RecordWait(ctx, row.Queue, d)
	}
}
