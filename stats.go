package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/histsql"
	"github.com/bunqueue/bunqueue/internal/stats"
)

// QueueKind tells a queue over one of the app's tables from a queue of
// the jobs table.
type QueueKind string

// Kinds of queue, the values of QueueStats.Kind.
const (
	// QueueKindTable is a queue over a table of the app's, declared with
	// NewQueue or NewBatchQueue.
	QueueKindTable QueueKind = "table"
	// QueueKindJobs is a queue of the jobs table, one of Config.JobQueues.
	QueueKindJobs QueueKind = "jobs"
)

// QueueStats is what Client.Stats tells of one queue: its settings, its
// depth in the database, and what this process's workers did with it.
type QueueStats struct {
	// Name is the queue's name.
	Name string `json:"name"`
	// Kind says whether the queue is over a table of the app's or the
	// jobs table.
	Kind QueueKind `json:"kind"`
	// Table is the queue's table: the model's, or the client's jobs table
	// (bunqueue_jobs, or its name under Config.Tables).
	Table string `json:"table"`
	// Workers is the number of worker goroutines the queue has in this
	// process once the client is started.
	Workers int `json:"workers"`
	// Depth is the number of rows (or due jobs) waiting in the queue and
	// not locked, counted up to QueueDepthLimit, as the
	// bunqueue.queue.depth gauge counts them; -1 when it could not be
	// counted (Stats then returns the error too).
	Depth int `json:"depth"`
	// InFlight is the number of rows or jobs this process's workers hold
	// now.
	InFlight int `json:"in_flight"`
	// ProcessedLastMinute and ProcessedLastHour count the rows and jobs
	// this process's workers completed, over the last minute (to the
	// second) and the last hour (to the minute).
	ProcessedLastMinute int64 `json:"processed_last_minute"`
	ProcessedLastHour   int64 `json:"processed_last_hour"`
	// FailedLastMinute and FailedLastHour count the rows and jobs whose
	// handler or worker failed in this process (an error, a panic, a row
	// that stayed in its queue, a lost lease; a job that will be retried
	// counts too, a snoozed job does not), over the same windows.
	FailedLastMinute int64 `json:"failed_last_minute"`
	FailedLastHour   int64 `json:"failed_last_hour"`
	// Paused says whether the queue is paused (PauseQueue), for every
	// process: the database's flag, read by Stats.
	Paused bool `json:"paused"`
	// GlobalLimit, KeyLimit with KeyColumn, RateLimit and KeyRate are the
	// limits in force on the queue, as its QueueConfig or JobQueueConfig
	// sets them (zero: none). A jobs queue's KeyColumn is the jobs
	// table's column of EnqueueOpts.LimitKey when it has a KeyLimit or a
	// KeyRate.
	GlobalLimit int    `json:"global_limit"`
	KeyLimit    int    `json:"key_limit"`
	KeyColumn   string `json:"key_column"`
	RateLimit   Rate   `json:"rate_limit"`
	KeyRate     Rate   `json:"key_rate"`
}

// queueLimits are a queue's limits, as QueueStats reports them.
type queueLimits struct {
	global, key   int
	keyColumn     string
	rate, keyRate Rate
}

// fill sets st's limits to l.
func (l queueLimits) fill(st *QueueStats) {
	st.GlobalLimit, st.KeyLimit, st.KeyColumn, st.RateLimit, st.KeyRate = l.global, l.key, l.keyColumn, l.rate, l.keyRate
}

// Stats returns a snapshot of the client's queues: first the queues over
// the app's tables, in the order they were added, then, if workers were
// added with AddWorker, the jobs queues of Config.JobQueues by name. The
// depths are read from the database, one capped count per queue (each
// locks the rows it counts, skipping locked ones, for one statement); the
// other figures are this process's, kept in memory since NewClient. Stats
// only reads, and may be called before Start and after Stop. If a depth
// cannot be counted, that queue's Depth is -1 and the error is returned
// with the stats of every queue.
func (c *Client) Stats(ctx context.Context) ([]QueueStats, error) {
	sources := c.statsSources()
	out := make([]QueueStats, len(sources))
	var errs []error
	names, _, err := c.readPaused(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("bunqueue: read the paused queues: %w", err))
	}
	paused := map[string]bool{}
	for _, name := range names {
		paused[name] = true
	}
	now := time.Now()
	for i, s := range sources {
		st := s.stats
		n, err := s.depth(ctx, QueueDepthLimit)
		if err != nil {
			n = -1
			errs = append(errs, err) // it names the queue: "bunqueue: queue \"q\": count: …"
		}
		st.Depth = n
		st.Paused = paused[st.Name]
		c.counts.read(&st, now)
		out[i] = st
	}
	return out, errors.Join(errs...)
}

// statsSource is a queue as Stats and the process registry read it: its
// settings, its mode, and how to count its depth.
type statsSource struct {
	stats QueueStats
	mode  JobMode
	depth func(ctx context.Context, limit int) (int, error)
}

// statsSources returns the client's queues, the table queues in the
// order they were added, then the jobs queues by name.
func (c *Client) statsSources() []statsSource {
	c.mu.Lock()
	queues := slices.Clone(c.queues)
	jobs := len(c.kinds) > 0
	c.mu.Unlock()

	var sources []statsSource
	for _, q := range queues {
		r := q.runner()
		st := QueueStats{Name: r.Name, Kind: QueueKindTable, Table: r.table.Name, Workers: r.Workers}
		r.limits.fill(&st)
		sources = append(sources, statsSource{st, ModeLock, r.Depth})
	}
	if !jobs {
		return sources
	}
	names := make([]string, 0, len(c.cfg.JobQueues))
	for name := range c.cfg.JobQueues {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		qc := c.cfg.JobQueues[name]
		st := QueueStats{Name: name, Kind: QueueKindJobs, Table: c.tables.Jobs, Workers: qc.Workers}
		queueLimits{qc.GlobalLimit, qc.KeyLimit, keyColumn(qc), qc.RateLimit, qc.KeyRate}.fill(&st)
		sources = append(sources, statsSource{st, qc.Mode, c.jobDepth(name)})
	}
	return sources
}

// Failure is a recent failure of a row or job in this process, as
// Client.RecentFailures returns it.
type Failure struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	// Key names the row by its primary key, such as "id=42" (a job's id
	// for jobs queues).
	Key string `json:"key"`
	// Error is the failure's message, cut to RecentFailureBytes.
	Error string `json:"error"`
	// At is when the failure was counted, by this process's clock.
	At time.Time `json:"at"`
	// SucceededAt is when this client next completed the same row (the
	// same queue and key) after the failure, by this process's clock; zero
	// if it has not since. Like the failures themselves, it is this
	// client's view only: a completion by another process or client leaves
	// it zero.
	SucceededAt time.Time `json:"succeeded_at,omitzero"`
}

// RecentFailuresLimit is how many failures Client.RecentFailures keeps,
// and RecentFailureBytes how much of each one's message.
const (
	RecentFailuresLimit = 100
	RecentFailureBytes  = 4096
)

// RecentFailures returns the latest failures of rows and jobs in this
// process (at most RecentFailuresLimit, newest first): those counted in
// QueueStats.FailedLastMinute and FailedLastHour. Failures of queues over
// the app's own tables are only logged otherwise; a failed job is also in
// the failed jobs once it has used up its attempts (see FailedJobs).
func (c *Client) RecentFailures() []Failure {
	recent := c.counts.Recent()
	out := make([]Failure, len(recent))
	for i, f := range recent {
		out[i] = Failure(f)
	}
	return out
}

// counters are a client's in-memory counts behind Stats, History and
// RecentFailures, by queue name, and those its heartbeat has yet to add
// to the fleet's history. The zero value is ready to use.
type counters struct {
	stats.Counters
	// pending is what the next heartbeat adds to the fleet's history.
	pending histsql.Pending
}

// read fills in st's in-memory figures, as of now.
func (m *counters) read(st *QueueStats, now time.Time) {
	f := m.Read(st.Name, now)
	st.InFlight = f.InFlight
	st.ProcessedLastMinute, st.FailedLastMinute = f.ProcessedLastMinute, f.FailedLastMinute
	st.ProcessedLastHour, st.FailedLastHour = f.ProcessedLastHour, f.FailedLastHour
}

// running counts n rows of queue in flight while run runs: a worker's
// batch, from the hand-over of its keys until its transaction ended.
func (m *counters) running(queue string, n int, run func() engine.Result) engine.Result {
	m.AddInFlight(queue, n)
	defer m.AddInFlight(queue, -n)
	return run()
}

// add counts rows or jobs of queue that finished at now: processed of
// them completed, and the errors of the others. completed, if not nil,
// returns the keys of the completed ones (see stats.Counters.Add).
func (m *counters) add(queue string, processed int, completed func() []string, errs []error, now time.Time) {
	var failures []stats.Failure
	for _, err := range errs {
		if isFailure(err) {
			failures = append(failures, failure(queue, err, now))
		}
	}
	m.Add(queue, processed, completed, failures, now)
	m.pending.Done(queue, processed, len(failures))
}

// failure describes err, an item's error, as a Failure.
func failure(queue string, err error, now time.Time) stats.Failure {
	f := stats.Failure{Queue: queue, At: now}
	var ie *ItemError
	if errors.As(err, &ie) && ie.Err != nil {
		f.Key, err = ie.Key, ie.Err
	}
	f.Error = err.Error()
	if len(f.Error) > RecentFailureBytes {
		f.Error = strings.ToValidUTF8(f.Error[:RecentFailureBytes], "")
	}
	return f
}

// finishedBatch counts what a claim transaction of queue did, once it
// ended: its completed rows, marking their earlier failures, and its
// failed ones if it committed (a batch that did not commit put its rows
// back as they were).
func (c *Client) finishedBatch(queue string, res engine.Result) {
	if res.Err == nil {
		c.counts.add(queue, res.Done, func() []string { return res.Completed }, res.ItemErrs, time.Now())
	}
}

// finishedJob counts one lease-mode job of queue, job id, once it ended
// with err (nil: completed, marking its earlier failures).
func (c *Client) finishedJob(queue string, id int64, err error) {
	if err == nil {
		c.counts.add(queue, 1, func() []string { return []string{jobKey(id)} }, nil, time.Now())
	} else {
		c.counts.add(queue, 0, nil, []error{err}, time.Now())
	}
}

// jobKey is a job's key in its failures: "id=42".
func jobKey(id int64) string { return "id=" + strconv.FormatInt(id, 10) }

// isFailure reports whether an item's error counts as a failure in Stats:
// a snooze does not, nor a job given back because the client stopped.
func isFailure(err error) bool {
	var snooze *snoozeError
	return !errors.As(err, &snooze) && !errors.Is(err, context.Canceled)
}
