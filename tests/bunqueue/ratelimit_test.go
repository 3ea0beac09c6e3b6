package bunqueue_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

const (
	rateClients = 3
	rateWorkers = 3
	rateBatch   = 2
	rateWork    = 2 * time.Millisecond
)

var errRateFirst = errors.New("the first attempt fails")

// rateRow is the row of a rate test's table; each test has a table, and
// a model, of its own.
type rateRow struct {
	ID       int64 `bun:",pk"`
	Customer *int64
	Status   string
}

func (r *rateRow) row() *rateRow { return r }

// rateModel is a model of a rate test's table.
type rateModel[T any] interface {
	*T
	row() *rateRow
}

type rateItem struct {
	bun.BaseModel `bun:"table:bq_rate_items"`
	rateRow
}

type keyRateItem struct {
	bun.BaseModel `bun:"table:bq_keyrate_items"`
	rateRow
}

type rateLateItem struct {
	bun.BaseModel `bun:"table:bq_ratelate_items"`
	rateRow
}

type rateFailItem struct {
	bun.BaseModel `bun:"table:bq_ratefail_items"`
	rateRow
}

// rateStarts records when handlers start, in all and by key, and how
// often each item ran. A start's time is the instant the rate limit
// counted it, which the engine records on the item's span as the
// bunqueue.rate_limit.start event (the clients have an OpenTelemetry SDK
// provider) right before it calls the handler: no earlier than the take
// of the item's slots, and what the slots' holds are measured from. The
// bound the tests check (no more than N such instants in any window of
// Per) then follows from the mechanism with no slack, whatever the
// machine's load; a time read in the handler would add the lag of the
// call itself, which a loaded machine does not bound.
type rateStarts struct {
	limited bool // every item is limited (a RateLimit): each start has its event
	mu      sync.Mutex
	at      []time.Time
	byKey   map[int64][]time.Time
	runs    map[int64]int
}

// begin records a start of item id, of key (nil: none), whose handler
// got ctx, and returns how many times it started before.
func (s *rateStarts) begin(ctx context.Context, id int64, key *int64) int {
	span, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan)
	if !ok {
		panic("the handler's context carries no SDK span: the clients need a TracerProvider")
	}
	var now time.Time
	for _, e := range span.Events() {
		if e.Name == "bunqueue.rate_limit.start" {
			now = e.Time // the last: a batch of one item shares the batch's span
		}
	}
	switch {
	case now.IsZero() && key == nil && !s.limited:
		now = time.Now() // an item without a key, under a KeyRate alone: not limited
	case now.IsZero():
		panic("the item's span has no bunqueue.rate_limit.start event")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs, s.byKey = map[int64]int{}, map[int64][]time.Time{}
	}
	s.at = append(s.at, now)
	if key != nil {
		s.byKey[*key] = append(s.byKey[*key], now)
	}
	s.runs[id]++
	return s.runs[id] - 1
}

// started returns how many handler runs began.
func (s *rateStarts) started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// checkWindows requires that no window of length r.Per
// holds more than r.N of starts, and returns the span from the first
// start to the last.
func checkWindows(t *testing.T, what string, starts []time.Time, r bunqueue.Rate) time.Duration {
	t.Helper()
	at := slices.Clone(starts)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	closest := time.Duration(1<<63 - 1)
	for i := 0; i+r.N < len(at); i++ {
		closest = min(closest, at[i+r.N].Sub(at[i]))
	}
	t.Logf("%s: %d starts; closest starts %d apart: %s (Per %s)", what, len(at), r.N, closest, r.Per)
	require.Greater(t, len(at), r.N, "%s: more starts than N, or the test proves nothing", what)
	require.GreaterOrEqual(t, closest, r.Per, "%s: more than %d starts within %s", what, r.N, r.Per)
	return at[len(at)-1].Sub(at[0])
}

// checkOnce requires that each of n items ran exactly once.
func (s *rateStarts) checkOnce(t *testing.T, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.runs, n, "items run")
	for id, runs := range s.runs {
		require.Equal(t, 1, runs, "runs of item %d", id)
	}
}

// rateCycles is how many periods the rate test's items take: 10 (10 s)
// with BUNQUEUE_LONG=1, 3 (3 s) by default.
func rateCycles() int {
	if os.Getenv("BUNQUEUE_LONG") == "1" {
		return 10
	}
	return 3
}

// rateItems creates the table of T with items 1 to n, of customer key(i)
// (nil: none), and returns its name.
func rateItems[T any, PT rateModel[T]](t *testing.T, db *bun.DB, n int, key func(i int) *int64) string {
	t.Helper()
	table := db.Table(reflect.TypeFor[T]()).Name
	srvTable(t, db, table, "id BIGINT NOT NULL PRIMARY KEY, customer BIGINT NULL, status VARCHAR(16) NOT NULL DEFAULT 'waiting'", "status, id")
	items := make([]T, n)
	for i := range items {
		*PT(&items[i]).row() = rateRow{ID: int64(i + 1), Customer: key(i), Status: "waiting"}
	}
	_, err := db.NewInsert().Model(&items).Exec(t.Context())
	require.NoError(t, err)
	return table
}

// rateJobArgs is a rate test's job: its item and customer.
type rateJobArgs struct {
	N        int64  `json:"n"`
	Customer *int64 `json:"customer"`
}

func (rateJobArgs) Kind() string { return "rate_job" }

// enqueueRateJobs enqueues jobs 1 to n to queue, of customer key(i),
// which is also their LimitKey.
func enqueueRateJobs(t *testing.T, db *bun.DB, queue string, n int, key func(i int) *int64) {
	t.Helper()
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	params := make([]bunqueue.EnqueueParams, n)
	for i := range params {
		opts := &bunqueue.EnqueueOpts{Queue: queue}
		if k := key(i); k != nil {
			opts.LimitKey = fmt.Sprint(*k)
		}
		params[i] = bunqueue.EnqueueParams{Args: rateJobArgs{N: int64(i + 1), Customer: key(i)}, Opts: opts}
	}
	_, err := c.EnqueueMany(t.Context(), db, params)
	require.NoError(t, err)
}

// rateRun is one rate test's fleet: its queue, its limits, and what the
// handlers do (fail: the first attempt of each item fails).
type rateRun struct {
	srv     dbtest.Server
	queue   string
	rate    bunqueue.Rate
	keyRate bunqueue.Rate
	fail    bool
	work    time.Duration // each handler's work; rateWork if zero
	starts  rateStarts
}

// handle is the handlers' work: record the start, then fail the first
// attempt if asked.
func (r *rateRun) handle(ctx context.Context, id int64, key *int64) error {
	before := r.starts.begin(ctx, id, key)
	time.Sleep(cmp.Or(r.work, rateWork))
	if r.fail && before == 0 {
		return errRateFirst
	}
	return nil
}

// startTable starts the clients of a table queue of T.
func startTable[T any, PT rateModel[T]](t *testing.T, r *rateRun) {
	t.Helper()
	for range pauseClientsOn(r.srv) {
		cfg := &bunqueue.QueueConfig[T]{Workers: rateWorkers, BatchSize: rateBatch, PollInterval: 50 * time.Millisecond,
			Cooldown: time.Millisecond, RateLimit: r.rate, KeyRate: r.keyRate}
		if r.keyRate.N > 0 {
			cfg.KeyColumn = "customer"
		}
		q := bunqueue.NewQueue(r.queue, heWaiting, func(ctx context.Context, tx bun.Tx, it *T) error {
			row := PT(it).row()
			if err := r.handle(ctx, row.ID, row.Customer); err != nil {
				return err
			}
			return setStatus(ctx, tx, it, "done")
		}, cfg)
		c, err := bunqueue.NewClient(r.srv.Open(t, 0), &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: testLogger(t),
			TracerProvider: rateTracer(t)})
		require.NoError(t, err)
		require.NoError(t, c.Add(q))
		start(t, c)
	}
}

// rateTracer is a client's TracerProvider: its spans are the SDK's,
// whose start times the handlers read (see rateStarts).
func rateTracer(t *testing.T) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// startJobs starts the clients of a jobs queue in mode.
func (r *rateRun) startJobs(t *testing.T, mode bunqueue.JobMode) {
	t.Helper()
	for range pauseClientsOn(r.srv) {
		c := jobsTestClient(t, r.srv.Open(t, 0), bunqueue.Config{
			PollInterval: 50 * time.Millisecond, Backoff: func(int) time.Duration { return time.Millisecond }, TracerProvider: rateTracer(t),
			JobQueues: map[string]bunqueue.JobQueueConfig{r.queue: {Mode: mode, Workers: rateWorkers, BatchSize: rateBatch, Lease: 2 * time.Second,
				RateLimit: r.rate, KeyRate: r.keyRate}},
		})
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[rateJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[rateJobArgs]) error {
			return r.handle(ctx, job.Args.N, job.Args.Customer)
		})))
		start(t, c)
	}
}

// runRate runs n items (table: rows of T; else jobs in that mode), of
// customer key(i), to their end, on r's clients.
func runRate[T any, PT rateModel[T]](t *testing.T, r *rateRun, kind string, n int, key func(i int) *int64) {
	t.Helper()
	db := r.srv.Open(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	r.starts.limited = r.rate.N > 0
	runs := n
	if r.fail {
		runs = 2 * n
	}
	var table string
	if kind == "table" {
		t.Cleanup(func() { clearSlots(db, r.queue) })
		table = rateItems[T, PT](t, db, n, key)
		startTable[T, PT](t, r)
	} else {
		r.queue = ownJobQueue(t, db)
		t.Cleanup(func() { clearSlots(db, r.queue) })
		enqueueRateJobs(t, db, r.queue, n, key)
		mode := bunqueue.ModeLock
		if kind == "jobs-lease" {
			mode = bunqueue.ModeLease
		}
		r.startJobs(t, mode)
	}
	eventually(t, 60*time.Second, func() bool { return r.starts.started() >= runs }, "every item started")
	if kind == "table" {
		eventually(t, 10*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE status = 'done'") == n
		}, "every item done")
	} else {
		eventually(t, 10*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", r.queue) == 0
		}, "every job done")
	}
	time.Sleep(100 * time.Millisecond) // a run too many would show
	require.Equal(t, runs, r.starts.started(), "handler runs")
}

var rateKinds = []string{"table", "jobs-lock", "jobs-lease"}

// Three clients on pools of their own (one on SQLite) × three workers
// with batches of two, on a queue with a RateLimit of 10 per second, a
// table queue and jobs queues in lock and lease mode: no window of a
// second holds more than 10 starts; every item runs once. (The rate
// reached, a share of the limit, is the bench's rate-limit scenarios'.)
func TestRateLimitAcrossProcesses(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, kind := range rateKinds {
			t.Run(kind, func(t *testing.T) {
				rate := bunqueue.Rate{N: 10, Per: time.Second}
				r := &rateRun{srv: srv, queue: dbtest.Name("rate"), rate: rate}
				n := rate.N*rateCycles() + 1 // the last one starts rateCycles periods after the first
				runRate[rateItem](t, r, kind, n, func(int) *int64 { return nil })
				r.starts.checkOnce(t, n)
				span := checkWindows(t, kind, r.starts.at, rate)
				ideal := time.Duration(rateCycles()) * rate.Per
				t.Logf("%s: %d items in %s, the rate allows them in %s: %.3f of the rate", kind, n, span.Round(time.Millisecond), ideal, ideal.Seconds()/span.Seconds())
			})
		}
	})
}

// A KeyRate of 3 per second over 4 customers (and rows without one,
// which are not limited), on the same fleet: no customer's window of a
// second holds more than 3 starts, and every item runs once.
func TestKeyRateAcrossProcesses(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, kind := range rateKinds {
			t.Run(kind, func(t *testing.T) {
				rate := bunqueue.Rate{N: 3, Per: time.Second}
				r := &rateRun{srv: srv, queue: dbtest.Name("keyrate"), keyRate: rate}
				const n = 30
				key := func(i int) *int64 {
					if i%10 == 9 {
						return nil
					}
					k := int64(i % 4)
					return &k
				}
				runRate[keyRateItem](t, r, kind, n, key)
				r.starts.checkOnce(t, n)
				require.Len(t, r.starts.byKey, 4, "customers")
				for k, at := range r.starts.byKey {
					checkWindows(t, fmt.Sprintf("%s, customer %d", kind, k), at, rate)
				}
			})
		}
	})
}

// A handler that fails (its transaction rolls back in lock mode) has
// started: its start holds a slot of the RateLimit, and of the KeyRate,
// as a success does. Every item fails once and then succeeds; the
// windows of a second of all the starts, failed ones included, hold at
// most 3, and
// at most 2 of each of the two customers.
func TestRateLimitCountsFailures(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, kind := range rateKinds {
			t.Run(kind, func(t *testing.T) {
				rate := bunqueue.Rate{N: 3, Per: time.Second}
				r := &rateRun{srv: srv, queue: dbtest.Name("ratefail"), rate: rate, keyRate: bunqueue.Rate{N: 2, Per: time.Second}, fail: true}
				const n = 4
				runRate[rateFailItem](t, r, kind, n, func(i int) *int64 { k := int64(i % 2); return &k })
				checkWindows(t, kind+", every start", r.starts.at, rate)
				for k, at := range r.starts.byKey {
					checkWindows(t, fmt.Sprintf("%s, customer %d", kind, k), at, r.keyRate)
				}
			})
		}
	})
}

// Handlers slower than the rate's grace (a tenth of Per) in batches of
// two: the second item of each batch, and in lease mode the second job,
// starts after its slot's grace has passed, so its slot's hold must be
// extended before it starts (or the item goes back to its queue). No
// window of Per holds more than N starts; every item runs once.
func TestRateLimitLateStarts(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, kind := range rateKinds {
			t.Run(kind, func(t *testing.T) {
				rate := bunqueue.Rate{N: 4, Per: 200 * time.Millisecond}
				r := &rateRun{srv: srv, queue: dbtest.Name("ratelate"), rate: rate, work: 40 * time.Millisecond}
				n := rate.N*rateCycles() + 1
				runRate[rateLateItem](t, r, kind, n, func(int) *int64 { return nil })
				r.starts.checkOnce(t, n)
				checkWindows(t, kind, r.starts.at, rate)
			})
		}
	})
}

// A Rate is off (both zero) or N from 1 to RateMaxN with Per at least a
// millisecond; anything else is refused at Add and NewClient, naming the
// queue and the field; a KeyRate needs a KeyColumn.
func TestRateLimitErrors(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	bad := []struct {
		rate bunqueue.Rate
		want string
	}{
		{bunqueue.Rate{N: 5}, "Per must be at least 1ms (with N), got 5/0s"},
		{bunqueue.Rate{Per: time.Second}, "N must be 1 to 10000 (with Per), got 0/1s"},
		{bunqueue.Rate{N: -1, Per: time.Second}, "N must be 1 to 10000 (with Per), got -1/1s"},
		{bunqueue.Rate{N: bunqueue.RateMaxN + 1, Per: time.Second}, "N must be 1 to 10000 (with Per), got 10001/1s"},
		{bunqueue.Rate{N: 1, Per: time.Microsecond}, "Per must be at least 1ms (with N), got 1/1µs"},
	}
	for _, tc := range bad {
		c, err := bunqueue.NewClient(db, nil)
		require.NoError(t, err)
		q := bunqueue.NewQueue("rl", heWaiting, func(context.Context, bun.Tx, *rateItem) error { return nil },
			&bunqueue.QueueConfig[rateItem]{RateLimit: tc.rate})
		require.ErrorContains(t, c.Add(q), `queue "rl": QueueConfig.RateLimit: `+tc.want)
		q = bunqueue.NewQueue("rl", heWaiting, func(context.Context, bun.Tx, *rateItem) error { return nil },
			&bunqueue.QueueConfig[rateItem]{KeyColumn: "customer", KeyRate: tc.rate})
		require.ErrorContains(t, c.Add(q), `queue "rl": QueueConfig.KeyRate: `+tc.want)
		_, err = bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"q": {RateLimit: tc.rate}}})
		require.ErrorContains(t, err, `Config.JobQueues["q"].RateLimit: `+tc.want)
		_, err = bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"q": {KeyRate: tc.rate}}})
		require.ErrorContains(t, err, `Config.JobQueues["q"].KeyRate: `+tc.want)
	}
	c, err := bunqueue.NewClient(db, nil)
	require.NoError(t, err)
	q := bunqueue.NewQueue("rl", heWaiting, func(context.Context, bun.Tx, *rateItem) error { return nil },
		&bunqueue.QueueConfig[rateItem]{KeyRate: bunqueue.Rate{N: 1, Per: time.Second}})
	require.ErrorContains(t, c.Add(q), `queue "rl": QueueConfig.KeyLimit and KeyRate need a KeyColumn`)
}
