package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/extra/bunotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of tracing.go: spans and metrics as an OpenTelemetry SDK sees
// them, with real transactions on the real database. Every test has its
// own providers, given through bunqueue.Config; the otel globals are never
// set.

const instrumentationScope = "github.com/bunqueue/bunqueue"

// telBundle is one process's telemetry: spans exported synchronously to
// memory as they end, metrics read by hand.
type telBundle struct {
	tp     *sdktrace.TracerProvider
	spans  *tracetest.InMemoryExporter
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

// newTelBundle returns fresh providers, shut down when the test ends. Call
// it before start, so that clients stop before their providers do.
func newTelBundle(t *testing.T) *telBundle {
	t.Helper()
	b := &telBundle{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(b.spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	t.Cleanup(func() {
		_ = b.tp.Shutdown(context.Background())
		_ = b.mp.Shutdown(context.Background())
	})
	return b
}

// config returns cfg with b's providers, a fast poll and the test's log.
func (b *telBundle) config(t *testing.T, cfg bunqueue.Config) *bunqueue.Config {
	cfg.TracerProvider, cfg.MeterProvider = b.tp, b.mp
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	return &cfg
}

// client returns a client configured by b.config(cfg) with queues added.
func (b *telBundle) client(t *testing.T, db *bun.DB, cfg bunqueue.Config, queues ...bunqueue.AnyQueue) *bunqueue.Client {
	t.Helper()
	c, err := bunqueue.NewClient(db, b.config(t, cfg))
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, c.Add(q))
	}
	return c
}

// request starts a span that stands for the app's HTTP request.
func (b *telBundle) request(ctx context.Context) (context.Context, trace.Span) {
	return b.tp.Tracer("app").Start(ctx, "request", trace.WithSpanKind(trace.SpanKindServer))
}

// collect reads the metrics.
func (b *telBundle) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	return rm
}

// spanWhere selects spans.
type spanWhere func(s tracetest.SpanStub) bool

func spanNamed(name string) spanWhere {
	return func(s tracetest.SpanStub) bool { return s.Name == name }
}

func spanHas(key string, want any) spanWhere {
	return func(s tracetest.SpanStub) bool {
		got, ok := spanAttr(s, key)
		return ok && got == normalize(want)
	}
}

func spanAll(ps ...spanWhere) spanWhere {
	return func(s tracetest.SpanStub) bool {
		for _, p := range ps {
			if !p(s) {
				return false
			}
		}
		return true
	}
}

// processOf selects the process spans of one item.
func processOf(queue, id string) spanWhere {
	return spanAll(spanNamed("process "+queue), spanHas("messaging.message.id", id))
}

// jobProcessOf selects the process spans of a job: messaging.message.id is
// the job's id, in both modes, as on the send span.
func jobProcessOf(queue, id string) spanWhere {
	return processOf(queue, id)
}

func spansOf(exp *tracetest.InMemoryExporter, p spanWhere) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if p(s) {
			out = append(out, s)
		}
	}
	return out
}

// waitSpan waits for a span to end that p selects, and returns it; more
// than one is an error.
func waitSpan(t *testing.T, exp *tracetest.InMemoryExporter, p spanWhere, what string) tracetest.SpanStub {
	t.Helper()
	eventually(t, 20*time.Second, func() bool { return len(spansOf(exp, p)) > 0 }, "span: %s", what)
	got := spansOf(exp, p)
	require.Len(t, got, 1, "spans: %s", what)
	return got[0]
}

func spanAttr(s tracetest.SpanStub, key string) (any, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.AsInterface(), true
		}
	}
	return nil, false
}

func normalize(v any) any {
	if i, ok := v.(int); ok {
		return int64(i)
	}
	return v
}

// requireAttrs checks attributes of s; a nil value means absent.
func requireAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := spanAttr(s, k)
		if v == nil {
			require.False(t, ok, "span %q has %s=%v", s.Name, k, got)
			continue
		}
		require.True(t, ok, "span %q lacks %s; it has %v", s.Name, k, s.Attributes)
		require.Equal(t, normalize(v), got, "span %q: %s", s.Name, k)
	}
}

// requireFailed checks what a span records of a failure.
func requireFailed(t *testing.T, s tracetest.SpanStub, errType, msg string) {
	t.Helper()
	require.Equal(t, codes.Error, s.Status.Code, "span %q status", s.Name)
	requireAttrs(t, s, map[string]any{"error.type": errType})
	i := slices.IndexFunc(s.Events, func(e sdktrace.Event) bool { return e.Name == "exception" })
	require.GreaterOrEqual(t, i, 0, "span %q has no exception event: %v", s.Name, s.Events)
	var got string
	for _, kv := range s.Events[i].Attributes {
		if kv.Key == "exception.message" {
			got = kv.Value.AsString()
		}
	}
	require.Contains(t, got, msg, "exception.message")
}

func linksTo(s tracetest.SpanStub, sc trace.SpanContext) bool {
	return slices.ContainsFunc(s.Links, func(l sdktrace.Link) bool {
		return l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID()
	})
}

// metricPoints returns the data points of a counter or histogram whose
// attributes include all of where.
func metricPoints[N int64 | float64](t *testing.T, rm metricdata.ResourceMetrics, name string, where ...attribute.KeyValue) (sum N, count uint64, found bool) {
	t.Helper()
	has := func(set attribute.Set) bool {
		for _, kv := range where {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			require.Equal(t, instrumentationScope, sm.Scope.Name, "scope of %s", name)
			found = true
			switch d := m.Data.(type) {
			case metricdata.Sum[N]:
				require.True(t, d.IsMonotonic, "%s is a counter", name)
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						sum += p.Value
						count++
					}
				}
			case metricdata.Histogram[N]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						sum += p.Sum
						count += p.Count
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return sum, count, found
}

// counter returns the total of a counter over the points that match.
func counter(t *testing.T, rm metricdata.ResourceMetrics, name string, where ...attribute.KeyValue) int64 {
	t.Helper()
	sum, _, _ := metricPoints[int64](t, rm, name, where...)
	return sum
}

// histogramCount returns how many values a histogram recorded over the
// points that match.
func histogramCount(t *testing.T, rm metricdata.ResourceMetrics, name string, where ...attribute.KeyValue) uint64 {
	t.Helper()
	_, n, _ := metricPoints[float64](t, rm, name, where...)
	return n
}

func destination(queue string) attribute.KeyValue {
	return attribute.String("messaging.destination.name", queue)
}

func outcomeIs(o string) attribute.KeyValue { return attribute.String("bunqueue.outcome", o) }

// tracedArgs is the job of these tests; Do says how its worker fails.
type tracedArgs struct {
	N  int    `json:"n"`
	Do string `json:"do"` // "", "fail", "fail-once", "snooze", "cancel", "panic"
}

func (tracedArgs) Kind() string { return "traced" }

func tracedWorker(ctx context.Context, db bun.IDB, job *bunqueue.Job[tracedArgs]) error {
	switch job.Args.Do {
	case "fail":
		return errors.New("boom")
	case "fail-once":
		if job.Attempt == 1 {
			return errors.New("boom once")
		}
	case "snooze":
		return bunqueue.Snooze(time.Hour)
	case "cancel":
		return bunqueue.Cancel(errors.New("not wanted"))
	case "panic":
		panic("kaboom")
	}
	return nil
}

// enqueueTraced enqueues a job outside any span and returns its id.
func enqueueTraced(t *testing.T, c *bunqueue.Client, db bun.IDB, queue string, args tracedArgs, maxAttempts int) string {
	t.Helper()
	res, err := c.Enqueue(t.Context(), db, args, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: maxAttempts})
	require.NoError(t, err)
	return strconv.FormatInt(res.ID, 10)
}

// TracedRow is the row of the any-table queues of these tests; each test
// embeds it in a model of its own table, and keeps its queues apart by
// the queue column.
type TracedRow struct {
	ID          int64 `bun:",pk,autoincrement"`
	Queue       string
	Status      string
	Traceparent *string
}

const tracedColumns = "id BIGINT AUTO_INCREMENT PRIMARY KEY, queue VARCHAR(64) NOT NULL, " +
	"status VARCHAR(16) NOT NULL DEFAULT 'waiting', traceparent VARCHAR(55) NULL, INDEX (queue, status, id)"

// tracedQueue declares a queue over the rows of table T whose queue column
// is name.
func tracedQueue[T any](name string, handler bunqueue.HandlerFunc[T], cfg *bunqueue.QueueConfig[T]) *bunqueue.Queue[T] {
	return bunqueue.NewQueue(name,
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("queue = ?", name).Where("status = 'waiting'").Order("id")
		}, handler, cfg)
}

// markDone is a handler that takes the row out of its queue.
func markDone[T any](ctx context.Context, tx bun.Tx, item *T) error {
	_, err := tx.NewUpdate().Model(item).Set("status = 'done'").WherePK().Exec(ctx)
	return err
}

// insertTraced inserts a waiting row of queue into table and returns its
// id, the messaging.message.id of its process span.
func insertTraced(t *testing.T, db bun.IDB, table, queue string, traceparent any) string {
	t.Helper()
	id := insertID(t, db, "INSERT INTO ? (queue, traceparent) VALUES (?, ?)", bun.Ident(table), queue, traceparent)
	return strconv.FormatInt(id, 10)
}

// A request enqueues a job; another process (a client with telemetry of
// its own) runs it. The send span is the request's child; the process
// span is a new root linked to it, or with Config.ParentProcessSpans its
// child, in both job modes.
func TestTracingJobSendAndProcess(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, tc := range []struct {
		mode   bunqueue.JobMode
		parent bool
	}{
		{bunqueue.ModeLock, false},
		{bunqueue.ModeLease, false},
		{bunqueue.ModeLock, true},
		{bunqueue.ModeLease, true},
	} {
		name := tc.mode.String()
		if tc.parent {
			name += "/ParentProcessSpans"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			queue := ownJobQueue(t, db)
			queues := map[string]bunqueue.JobQueueConfig{queue: {Mode: tc.mode}}

			app := newTelBundle(t)
			producer := app.client(t, db, bunqueue.Config{JobQueues: queues})
			ctx, req := app.request(t.Context())
			res, err := producer.Enqueue(ctx, db, tracedArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			req.End()
			id := strconv.FormatInt(res.ID, 10)

			send := waitSpan(t, app.spans, spanNamed("send "+queue), "send span")
			require.Equal(t, trace.SpanKindProducer, send.SpanKind)
			require.Equal(t, req.SpanContext().TraceID(), send.SpanContext.TraceID(), "send span in the request's trace")
			require.Equal(t, req.SpanContext().SpanID(), send.Parent.SpanID(), "send span is the request's child")
			require.Equal(t, instrumentationScope, send.InstrumentationScope.Name)
			require.Equal(t, codes.Unset, send.Status.Code)
			requireAttrs(t, send, map[string]any{
				"messaging.system":           "bunqueue",
				"messaging.destination.name": queue,
				"messaging.operation.type":   "send",
				"messaging.operation.name":   "send",
				"messaging.message.id":       id,
				"bunqueue.job.kind":          "traced",
			})

			worker := newTelBundle(t)
			consumer := worker.client(t, db, bunqueue.Config{JobQueues: queues, ParentProcessSpans: tc.parent})
			inWorker := make(chan trace.SpanContext, 1)
			require.NoError(t, bunqueue.AddWorker(consumer, bunqueue.WorkerFunc[tracedArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[tracedArgs]) error {
				select {
				case inWorker <- trace.SpanContextFromContext(ctx):
				default:
				}
				return nil
			})))
			start(t, consumer)

			proc := waitSpan(t, worker.spans, jobProcessOf(queue, id), "process span")
			require.Equal(t, trace.SpanKindConsumer, proc.SpanKind)
			require.Equal(t, instrumentationScope, proc.InstrumentationScope.Name)
			require.Equal(t, codes.Unset, proc.Status.Code, "status unset on success")
			require.Empty(t, proc.Events)
			requireAttrs(t, proc, map[string]any{
				"messaging.system":              "bunqueue",
				"messaging.destination.name":    queue,
				"messaging.operation.type":      "process",
				"messaging.operation.name":      "process",
				"bunqueue.job.kind":             "traced",
				"bunqueue.job.attempt":          1,
				"bunqueue.outcome":              "completed",
				"error.type":                    nil,
				"messaging.batch.message_count": nil,
			})
			select {
			case sc := <-inWorker:
				require.Equal(t, proc.SpanContext.SpanID(), sc.SpanID(), "the worker's context carries the process span")
			case <-time.After(5 * time.Second):
				t.Fatal("the worker did not run")
			}

			if !tc.parent {
				require.False(t, proc.Parent.IsValid(), "the process span is a new root")
				require.NotEqual(t, send.SpanContext.TraceID(), proc.SpanContext.TraceID())
				require.True(t, linksTo(proc, send.SpanContext), "process span links to the send span: %v", proc.Links)
			} else {
				require.Equal(t, send.SpanContext.TraceID(), proc.SpanContext.TraceID(), "the process span is in the send span's trace")
				require.Equal(t, send.SpanContext.SpanID(), proc.Parent.SpanID(), "the process span is the send span's child")
				// It links to the span of its claim, a root of this process.
				require.Len(t, proc.Links, 1)
				claim := waitSpan(t, worker.spans, func(s tracetest.SpanStub) bool {
					return s.SpanContext.SpanID() == proc.Links[0].SpanContext.SpanID()
				}, "the linked claim span")
				require.Equal(t, "process "+queue, claim.Name)
				require.False(t, claim.Parent.IsValid())
			}
			// Each process saw only its own side.
			require.Empty(t, spansOf(worker.spans, spanNamed("send "+queue)))
			require.Empty(t, spansOf(app.spans, spanNamed("process "+queue)))
		})
	}
}

// Failures are recorded on the process span: status Error, error.type, an
// exception event, and the outcome of the attempt.
func TestTracingJobErrors(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			queue := ownJobQueue(t, db)
			tel := newTelBundle(t)
			c := tel.client(t, db, bunqueue.Config{
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: 2}},
				Backoff:   fastBackoff,
			})
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))
			fail := enqueueTraced(t, c, db, queue, tracedArgs{Do: "fail"}, 2)
			snooze := enqueueTraced(t, c, db, queue, tracedArgs{Do: "snooze"}, 0)
			cancel := enqueueTraced(t, c, db, queue, tracedArgs{Do: "cancel"}, 0)
			panicked := enqueueTraced(t, c, db, queue, tracedArgs{Do: "panic"}, 1)
			start(t, c)

			first := waitSpan(t, tel.spans, spanAll(jobProcessOf(queue, fail), spanHas("bunqueue.job.attempt", 1)), "first attempt")
			requireFailed(t, first, "*errors.errorString", "boom")
			requireAttrs(t, first, map[string]any{"bunqueue.outcome": "retried"})

			last := waitSpan(t, tel.spans, spanAll(jobProcessOf(queue, fail), spanHas("bunqueue.job.attempt", 2)), "last attempt")
			requireFailed(t, last, "*errors.errorString", "boom")
			requireAttrs(t, last, map[string]any{"bunqueue.outcome": "failed"})

			s := waitSpan(t, tel.spans, jobProcessOf(queue, snooze), "snoozed job")
			requireAttrs(t, s, map[string]any{"bunqueue.outcome": "snoozed", "bunqueue.job.attempt": 1})

			s = waitSpan(t, tel.spans, jobProcessOf(queue, cancel), "cancelled job")
			requireFailed(t, s, "*errors.errorString", "not wanted")
			requireAttrs(t, s, map[string]any{"bunqueue.outcome": "cancelled"})

			s = waitSpan(t, tel.spans, jobProcessOf(queue, panicked), "panicking job")
			requireFailed(t, s, "panic", "kaboom")
			requireAttrs(t, s, map[string]any{"bunqueue.outcome": "failed"})
		})
	}
}

type traceErrItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_err"`
	TracedRow
}

// A handler of an any-table queue that fails: its span has status Error
// and the error recorded; the outcome says whether the row went back to
// the queue or OnError recorded the failure.
func TestTracingQueueHandlerErrors(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_trace_err", tracedColumns)
	recordFailure := func(ctx context.Context, tx bun.Tx, item *traceErrItem, err error) error {
		_, uerr := tx.NewUpdate().Model(item).Set("status = 'failed'").WherePK().Exec(ctx)
		return uerr
	}
	for _, tc := range []struct {
		name    string
		handler bunqueue.HandlerFunc[traceErrItem]
		onError func(context.Context, bun.Tx, *traceErrItem, error) error
		outcome string
		errType string // "" for success
		msg     string
	}{
		{"ok", markDone[traceErrItem], nil, "completed", "", ""},
		{"error", func(context.Context, bun.Tx, *traceErrItem) error { return errors.New("boom") }, nil, "released", "*errors.errorString", "boom"},
		{"wrapped error", func(context.Context, bun.Tx, *traceErrItem) error {
			return fmt.Errorf("send mail: %w", &dialError{"smtp"})
		}, nil, "released", "*bunqueue_test.dialError", "smtp"},
		{"error recorded by OnError", func(context.Context, bun.Tx, *traceErrItem) error { return errors.New("boom") }, recordFailure, "failed", "*errors.errorString", "boom"},
		{"panic", func(context.Context, bun.Tx, *traceErrItem) error { panic("kaboom") }, nil, "released", "panic", "kaboom"},
		{"row left in the queue", func(context.Context, bun.Tx, *traceErrItem) error { return nil }, nil, "released", "still_queued", "still matches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := dbtest.Name("err")
			tel := newTelBundle(t)
			q := tracedQueue(name, tc.handler, &bunqueue.QueueConfig[traceErrItem]{OnError: tc.onError})
			tel.client(t, db, bunqueue.Config{}, q)
			id := insertTraced(t, db, "bq_test_trace_err", name, nil)

			// Called inside a span of the caller's: the process span is a
			// root all the same.
			ctx, caller := tel.tp.Tracer("app").Start(t.Context(), "cron")
			defer caller.End()
			ok, err := q.ProcessNext(ctx)
			require.True(t, ok)
			if tc.errType == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			s := waitSpan(t, tel.spans, processOf(name, id), "process span")
			require.False(t, s.Parent.IsValid(), "a new root")
			require.NotEqual(t, caller.SpanContext().TraceID(), s.SpanContext.TraceID())
			requireAttrs(t, s, map[string]any{"bunqueue.outcome": tc.outcome, "bunqueue.job.attempt": nil, "bunqueue.job.kind": nil})
			if tc.errType == "" {
				require.Equal(t, codes.Unset, s.Status.Code)
				requireAttrs(t, s, map[string]any{"error.type": nil})
				return
			}
			requireFailed(t, s, tc.errType, tc.msg)
		})
	}
}

// dialError is an error type of the test's own, wrapped by fmt.Errorf:
// error.type names it, not the wrapper.
type dialError struct{ host string }

func (e *dialError) Error() string { return "dial " + e.host + ": connection refused" }

type traceColItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_col"`
	TracedRow
}

// The app stores bunqueue.TraceParent(ctx) in the row it inserts; the
// row's process span links to the request (or, with ParentProcessSpans,
// is its child). Rows without a valid traceparent get no link.
func TestTracingTraceColumn(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_trace_col", tracedColumns)
	require.Empty(t, bunqueue.TraceParent(t.Context()), "no span, no traceparent")

	for _, parent := range []bool{false, true} {
		t.Run(fmt.Sprintf("ParentProcessSpans=%v", parent), func(t *testing.T) {
			t.Parallel()
			name := dbtest.Name("col")
			tel := newTelBundle(t)
			q := tracedQueue(name, markDone[traceColItem], &bunqueue.QueueConfig[traceColItem]{TraceColumn: "traceparent"})
			tel.client(t, db, bunqueue.Config{ParentProcessSpans: parent}, q)

			ctx, req := tel.request(t.Context())
			tp := bunqueue.TraceParent(ctx)
			req.End()
			sc := req.SpanContext()
			require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", tp)
			require.Len(t, tp, 55, "fits a VARCHAR(55)")

			withTrace := insertTraced(t, db, "bq_test_trace_col", name, tp)
			without := insertTraced(t, db, "bq_test_trace_col", name, nil)
			garbage := insertTraced(t, db, "bq_test_trace_col", name, "not a traceparent")
			for range 3 {
				ok, err := q.ProcessNext(t.Context())
				require.True(t, ok)
				require.NoError(t, err)
			}

			s := waitSpan(t, tel.spans, processOf(name, withTrace), "row with a traceparent")
			requireAttrs(t, s, map[string]any{"bunqueue.outcome": "completed"})
			if parent {
				require.Equal(t, sc.TraceID(), s.SpanContext.TraceID())
				require.Equal(t, sc.SpanID(), s.Parent.SpanID(), "child of the request")
			} else {
				require.False(t, s.Parent.IsValid(), "a new root")
				require.NotEqual(t, sc.TraceID(), s.SpanContext.TraceID())
				require.True(t, linksTo(s, sc), "links to the request: %v", s.Links)
				require.Len(t, s.Links, 1)
			}
			for _, id := range []string{without, garbage} {
				s := waitSpan(t, tel.spans, processOf(name, id), "row "+id)
				require.False(t, s.Parent.IsValid() && s.Parent.TraceID() == sc.TraceID(), "row %s: not in the request's trace", id)
				require.False(t, linksTo(s, sc), "row %s links to the request", id)
				requireAttrs(t, s, map[string]any{"bunqueue.outcome": "completed"})
			}
		})
	}

	t.Run("a missing or non-string column", func(t *testing.T) {
		t.Parallel()
		for _, col := range []string{"no_such_column", "id"} {
			q := tracedQueue(dbtest.Name("col"), markDone[traceColItem], &bunqueue.QueueConfig[traceColItem]{TraceColumn: col})
			c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
			require.NoError(t, err)
			err = c.Add(q)
			require.Error(t, err, "TraceColumn %q", col)
			require.Contains(t, err.Error(), "TraceColumn")
			require.Contains(t, err.Error(), strconv.Quote(col))
		}
	})
}

type traceBatchItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_batch"`
	TracedRow
}

// A batch of five: one "process" span for the transaction with
// messaging.batch.message_count=5, and a child span per item, each with
// its own id, linked to its request when it has one.
func TestTracingBatchSpans(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_trace_batch", tracedColumns)
	name := dbtest.Name("batch")
	tel := newTelBundle(t)
	var handled atomic.Int64
	handler := func(ctx context.Context, tx bun.Tx, item *traceBatchItem) error {
		handled.Add(1)
		return markDone(ctx, tx, item)
	}
	q := tracedQueue(name, handler, &bunqueue.QueueConfig[traceBatchItem]{Workers: 1, BatchSize: 5, TraceColumn: "traceparent"})
	c := tel.client(t, db, bunqueue.Config{}, q)

	requests := map[string]trace.SpanContext{}
	var ids []string
	for i := range 5 {
		if i == 2 {
			ids = append(ids, insertTraced(t, db, "bq_test_trace_batch", name, nil))
			continue
		}
		ctx, req := tel.request(t.Context())
		id := insertTraced(t, db, "bq_test_trace_batch", name, bunqueue.TraceParent(ctx))
		req.End()
		requests[id] = req.SpanContext()
		ids = append(ids, id)
	}
	start(t, c)

	batch := waitSpan(t, tel.spans, spanAll(spanNamed("process "+name), spanHas("messaging.batch.message_count", 5)), "batch span")
	require.Equal(t, trace.SpanKindConsumer, batch.SpanKind)
	require.False(t, batch.Parent.IsValid(), "the batch span is a root")
	require.Equal(t, codes.Unset, batch.Status.Code)
	requireAttrs(t, batch, map[string]any{
		"messaging.system":           "bunqueue",
		"messaging.destination.name": name,
		"messaging.operation.type":   "process",
		"messaging.message.id":       nil,
	})
	for _, sc := range requests {
		require.True(t, linksTo(batch, sc), "the batch span links to every item's request")
	}
	require.Len(t, batch.Links, len(requests))

	var items []tracetest.SpanStub
	eventually(t, 10*time.Second, func() bool {
		items = spansOf(tel.spans, func(s tracetest.SpanStub) bool { return s.Parent.SpanID() == batch.SpanContext.SpanID() })
		return len(items) >= 5
	}, "five item spans")
	require.Len(t, items, 5)
	var got []string
	for _, s := range items {
		require.Equal(t, "process "+name, s.Name)
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		require.Equal(t, batch.SpanContext.TraceID(), s.SpanContext.TraceID())
		requireAttrs(t, s, map[string]any{
			"messaging.operation.type":      "process",
			"messaging.destination.name":    name,
			"bunqueue.outcome":              "completed",
			"messaging.batch.message_count": nil,
		})
		id, _ := spanAttr(s, "messaging.message.id")
		got = append(got, id.(string))
		if sc, ok := requests[id.(string)]; ok {
			require.True(t, linksTo(s, sc), "item %s links to its request", id)
			require.Len(t, s.Links, 1)
		} else {
			require.Empty(t, s.Links, "item %s has no creation context", id)
		}
	}
	require.ElementsMatch(t, ids, got)
	require.Equal(t, int64(5), handled.Load(), "each item handled once")
}

type traceBatchFnItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_batchfn"`
	TracedRow
}

// A batch handler's call is one process span, linked to every row's
// creation context, with no span per row; the metrics count every row.
func TestTracingBatchHandler(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_trace_batchfn", tracedColumns)
	name := dbtest.Name("batchfn")
	tel := newTelBundle(t)
	q := bunqueue.NewBatchQueue(name,
		func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("queue = ?", name).Where("status = 'waiting'").Order("id")
		},
		func(ctx context.Context, tx bun.Tx, items []traceBatchFnItem) error {
			ids := make([]int64, len(items))
			for i, it := range items {
				ids[i] = it.ID
			}
			_, err := tx.NewUpdate().Model((*traceBatchFnItem)(nil)).Set("status = 'done'").Where("id IN (?)", bun.List(ids)).Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[traceBatchFnItem]{Workers: 1, BatchSize: 5, TraceColumn: "traceparent"})
	c := tel.client(t, db, bunqueue.Config{}, q)
	var requests []trace.SpanContext
	for range 5 {
		ctx, req := tel.request(t.Context())
		insertTraced(t, db, "bq_test_trace_batchfn", name, bunqueue.TraceParent(ctx))
		req.End()
		requests = append(requests, req.SpanContext())
	}
	start(t, c)
	batch := waitSpan(t, tel.spans, spanAll(spanNamed("process "+name), spanHas("messaging.batch.message_count", 5)), "batch span")
	require.Equal(t, codes.Unset, batch.Status.Code)
	for _, sc := range requests {
		require.True(t, linksTo(batch, sc), "the batch span links to every row's request")
	}
	require.Len(t, batch.Links, len(requests))
	time.Sleep(100 * time.Millisecond)
	require.Len(t, spansOf(tel.spans, spanNamed("process "+name)), 1, "no span per row")
	rm := tel.collect(t)
	require.Equal(t, int64(5), counter(t, rm, "messaging.client.consumed.messages"))
}

type traceSQLItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_sql"`
	TracedRow
}

// With bunotel on the client's *bun.DB, the SQL spans of the claim
// transaction (BEGIN, the locking SELECT, the handler's writes, COMMIT)
// nest under the process span.
func TestTracingSQLSpansNestUnderProcessSpan(t *testing.T) {
	t.Parallel()
	hooked := func(tel *telBundle, db *bun.DB) {
		//lint:ignore SA1019 bun v1.3.0 has no WithQueryHook, the replacement it names
		db.AddQueryHook(bunotel.NewQueryHook(bunotel.WithTracerProvider(tel.tp), bunotel.WithMeterProvider(tel.mp),
			bunotel.WithFormattedQueries(true)))
	}
	// requireNested finds the SQL spans that match each pattern in the
	// process span's trace and checks that each descends from it.
	requireNested := func(t *testing.T, tel *telBundle, proc tracetest.SpanStub, patterns map[string]string) {
		t.Helper()
		byID := map[trace.SpanID]tracetest.SpanStub{}
		var sqlSpans []tracetest.SpanStub
		for _, s := range tel.spans.GetSpans() {
			byID[s.SpanContext.SpanID()] = s
			if s.SpanKind == trace.SpanKindClient && s.SpanContext.TraceID() == proc.SpanContext.TraceID() {
				sqlSpans = append(sqlSpans, s)
			}
		}
		for what, pattern := range patterns {
			re := regexp.MustCompile(pattern)
			i := slices.IndexFunc(sqlSpans, func(s tracetest.SpanStub) bool {
				stmt, _ := spanAttr(s, "db.statement")
				return re.MatchString(fmt.Sprint(stmt))
			})
			require.GreaterOrEqual(t, i, 0, "no SQL span for %s (%s) in the process span's trace; it has %d SQL spans", what, pattern, len(sqlSpans))
			s := sqlSpans[i]
			for depth := 0; ; depth++ {
				require.Less(t, depth, 10, "%s: parent chain too long", what)
				require.True(t, s.Parent.IsValid(), "%s: the parent chain ends before the process span", what)
				if s.Parent.SpanID() == proc.SpanContext.SpanID() {
					break
				}
				p, ok := byID[s.Parent.SpanID()]
				require.True(t, ok, "%s: parent span %s not exported", what, s.Parent.SpanID())
				s = p
			}
		}
	}

	t.Run("any table", func(t *testing.T) {
		t.Parallel()
		tel := newTelBundle(t)
		db := dbtest.Open(t, 0)
		createTable(t, db, "bq_test_trace_sql", tracedColumns)
		hooked(tel, db)
		name := dbtest.Name("sql")
		q := tracedQueue(name, markDone[traceSQLItem], nil)
		tel.client(t, db, bunqueue.Config{}, q)
		id := insertTraced(t, dbtest.Open(t, 0), "bq_test_trace_sql", name, nil)
		ok, err := q.ProcessNext(t.Context())
		require.True(t, ok)
		require.NoError(t, err)
		proc := waitSpan(t, tel.spans, processOf(name, id), "process span")
		requireNested(t, tel, proc, map[string]string{
			"BEGIN":               `^BEGIN$`,
			"the claim":           `^SELECT .*bq_test_trace_sql.*FOR (NO KEY )?UPDATE SKIP LOCKED`,
			"the handler's write": `^UPDATE .*bq_test_trace_sql.* SET status = 'done'`,
			"COMMIT":              `^COMMIT$`,
		})
	})

	t.Run("jobs lock mode", func(t *testing.T) {
		t.Parallel()
		tel := newTelBundle(t)
		db := migrated(t, 0)
		createTable(t, db, "bq_test_trace_sql_jobs", "id INT PRIMARY KEY, n INT NOT NULL")
		dbtest.Exec(t, db, "INSERT INTO bq_test_trace_sql_jobs VALUES (1, 0)")
		hooked(tel, db)
		queue := ownJobQueue(t, db)
		c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[tracedArgs]) error {
			_, err := db.NewRaw("UPDATE bq_test_trace_sql_jobs SET n = n + 1 WHERE id = 1").Exec(ctx)
			return err
		})))
		id := enqueueTraced(t, c, db, queue, tracedArgs{}, 0)
		start(t, c)
		proc := waitSpan(t, tel.spans, jobProcessOf(queue, id), "process span")
		requireNested(t, tel, proc, map[string]string{
			"BEGIN":              `^BEGIN$`,
			"the claim":          `^SELECT .*bunqueue_jobs.*FOR (NO KEY )?UPDATE SKIP LOCKED`,
			"the worker's write": `^UPDATE bq_test_trace_sql_jobs SET n = n \+ 1`,
			"the job's deletion": `^DELETE FROM bunqueue_jobs WHERE id = ` + id + `$`,
			"COMMIT":             `^COMMIT$`,
		})
	})
}

type traceMetricItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_metric"`
	TracedRow
}

type traceDeadlockItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_deadlock"`
	ID            int64 `bun:",pk"`
	Status        string
}

// The metrics after known work: jobs sent and consumed, attempts that
// failed and were retried, claim durations, and a transaction retried
// after a real deadlock.
func TestMetricsAfterProcessing(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	createTable(t, db, "bq_test_trace_metric", tracedColumns)
	createTable(t, db, "bq_test_trace_deadlock", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_trace_deadlock_res", "name VARCHAR(8) PRIMARY KEY, n INT NOT NULL")
	dbtest.Exec(t, db, "INSERT INTO bq_test_trace_deadlock (id) VALUES (1), (2)",
		"INSERT INTO bq_test_trace_deadlock_res VALUES ('x', 0), ('y', 0)")
	jobs := ownJobQueue(t, db)
	tel := newTelBundle(t)

	// An any-table queue of N rows, all fine.
	table := dbtest.Name("metric")
	tableQ := tracedQueue(table, markDone[traceMetricItem], &bunqueue.QueueConfig[traceMetricItem]{Workers: 2})

	// Two items that lock two rows in opposite orders: a real deadlock
	// (1213), and the victim's transaction runs again (retry_test.go).
	var first sync.WaitGroup
	first.Add(2)
	var firstOnce [3]sync.Once
	deadlock := dbtest.Name("deadlock")
	deadlockQ := bunqueue.NewQueue(deadlock,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *traceDeadlockItem) error {
			order := []string{"x", "y"}
			if it.ID == 2 {
				order = []string{"y", "x"}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE bq_test_trace_deadlock_res SET n = n + 1 WHERE name = ?", order[0]); err != nil {
				return err
			}
			firstOnce[it.ID].Do(func() {
				first.Done()
				first.Wait()
			})
			if _, err := tx.ExecContext(ctx, "UPDATE bq_test_trace_deadlock_res SET n = n + 1 WHERE name = ?", order[1]); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[traceDeadlockItem]{Workers: 2})

	c := tel.client(t, db, bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{jobs: {Workers: 2}},
		Backoff:   fastBackoff,
	}, tableQ, deadlockQ)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))

	const rows = 7
	for range rows {
		insertTraced(t, db, "bq_test_trace_metric", table, nil)
	}
	// Six jobs: two fail once, one is cancelled.
	do := []string{"", "fail-once", "", "fail-once", "", "cancel"}
	for i, d := range do {
		enqueueTraced(t, c, db, jobs, tracedArgs{N: i, Do: d}, 0)
	}
	start(t, c)
	eventually(t, 30*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_trace_metric WHERE queue = ? AND status = 'done'", table) == rows &&
			count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", jobs) == 0 &&
			count(t, db, "SELECT COUNT(*) FROM bq_test_trace_deadlock WHERE status = 'done'") == 2
	}, "all work done")
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stop)) // every item's metrics are recorded
	require.Equal(t, 2, count(t, db, "SELECT n FROM bq_test_trace_deadlock_res WHERE name = 'x'"), "each deadlock item's writes once")
	rm := tel.collect(t)

	// The any-table queue: N items, N completions.
	require.EqualValues(t, rows, counter(t, rm, "messaging.client.consumed.messages", destination(table)))
	require.EqualValues(t, rows, counter(t, rm, "messaging.client.consumed.messages", destination(table), outcomeIs("completed")))
	require.EqualValues(t, rows, histogramCount(t, rm, "messaging.process.duration", destination(table)))
	require.Zero(t, counter(t, rm, "bunqueue.items.failed", destination(table)))
	require.Zero(t, counter(t, rm, "bunqueue.items.retried", destination(table)))
	require.Positive(t, histogramCount(t, rm, "bunqueue.claim.duration", destination(table)), "claim durations")

	// The jobs: 6 sent; 6 + 2 attempts consumed; 3 failures, 2 of them
	// retried; the attempts' durations.
	attempts := len(do) + 2
	require.EqualValues(t, len(do), counter(t, rm, "messaging.client.sent.messages", destination(jobs)))
	require.EqualValues(t, attempts, counter(t, rm, "messaging.client.consumed.messages", destination(jobs)))
	require.EqualValues(t, len(do)-1, counter(t, rm, "messaging.client.consumed.messages", destination(jobs), outcomeIs("completed")))
	require.EqualValues(t, 1, counter(t, rm, "messaging.client.consumed.messages", destination(jobs), outcomeIs("cancelled")))
	require.EqualValues(t, attempts, histogramCount(t, rm, "messaging.process.duration", destination(jobs)))
	require.EqualValues(t, 3, counter(t, rm, "bunqueue.items.failed", destination(jobs)))
	require.EqualValues(t, 2, counter(t, rm, "bunqueue.items.failed", destination(jobs), attribute.String("error.type", "*errors.errorString"), outcomeIs("retried")))
	require.EqualValues(t, 2, counter(t, rm, "bunqueue.items.retried", destination(jobs)))
	require.Positive(t, histogramCount(t, rm, "bunqueue.claim.duration", destination(jobs)))
	require.EqualValues(t, attempts, histogramCount(t, rm, "bunqueue.job.wait", destination(jobs)), "each attempt's wait before start")
	require.Zero(t, histogramCount(t, rm, "bunqueue.job.wait", destination(table)), "a table queue's rows have no due time")
	require.Zero(t, counter(t, rm, "messaging.client.sent.messages", destination(table)), "rows inserted by the app are not sent by bunqueue")

	// The deadlock: one transaction retried; the victim's first attempt
	// counts as consumed and failed, released back to the queue.
	require.EqualValues(t, 1, counter(t, rm, "bunqueue.transaction.retries", destination(deadlock)))
	require.EqualValues(t, 3, counter(t, rm, "messaging.client.consumed.messages", destination(deadlock)))
	require.EqualValues(t, 2, counter(t, rm, "messaging.client.consumed.messages", destination(deadlock), outcomeIs("completed")))
	require.EqualValues(t, 1, counter(t, rm, "bunqueue.items.failed", destination(deadlock), outcomeIs("released")))
	require.Zero(t, counter(t, rm, "bunqueue.transaction.retries", destination(table)))
}

// Lease-mode queues report claim durations too.
func TestMetricsLeaseModeClaimDuration(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	tel := newTelBundle(t)
	c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: bunqueue.ModeLease}}})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))
	id := enqueueTraced(t, c, db, queue, tracedArgs{}, 0)
	start(t, c)
	waitSpan(t, tel.spans, jobProcessOf(queue, id), "process span")
	rm := tel.collect(t)
	require.EqualValues(t, 1, counter(t, rm, "messaging.client.consumed.messages", destination(queue)))
	require.EqualValues(t, 1, histogramCount(t, rm, "messaging.process.duration", destination(queue)))
	require.Positive(t, histogramCount(t, rm, "bunqueue.claim.duration", destination(queue)),
		"bunqueue.claim.duration is documented as 'BEGIN and the locking SELECT (or the lease UPDATE)'")
	require.EqualValues(t, 1, histogramCount(t, rm, "bunqueue.job.wait", destination(queue)), "the leased job's wait before start")
}

type traceEmptyItem struct {
	bun.BaseModel `bun:"table:bq_test_trace_empty"`
	TracedRow
}

// A claim that finds nothing is a "receive" span, not a "process" one; the
// workers of an idle queue make no span.
func TestTracingEmptyPollIsAReceiveSpan(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	createTable(t, db, "bq_test_trace_empty", tracedColumns)
	name := dbtest.Name("empty")
	jobs := ownJobQueue(t, db)
	tel := newTelBundle(t)
	q := tracedQueue(name, markDone[traceEmptyItem], nil)
	c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{jobs: {}}}, q)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))

	ok, err := q.ProcessNext(t.Context())
	require.False(t, ok)
	require.NoError(t, err)
	s := waitSpan(t, tel.spans, spanNamed("receive "+name), "receive span")
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
	require.False(t, s.Parent.IsValid())
	require.Equal(t, codes.Unset, s.Status.Code)
	requireAttrs(t, s, map[string]any{
		"messaging.system":              "bunqueue",
		"messaging.destination.name":    name,
		"messaging.operation.type":      "receive",
		"messaging.operation.name":      "receive",
		"messaging.batch.message_count": 0,
		"messaging.message.id":          nil,
	})

	// Running workers of an idle queue make no span at all: their feed
	// reads with a plain SELECT and opens no claim transaction.
	before := len(tel.spans.GetSpans())
	reads := &readCounter{}
	db.AddQueryHook(reads)
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return reads.n.Load() >= 2 }, "the feeds read both queues")
	time.Sleep(10 * 20 * time.Millisecond) // ten more polls
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stop))
	require.Len(t, tel.spans.GetSpans(), before, "an idle queue made spans")
	rm := tel.collect(t)
	require.Zero(t, counter(t, rm, "messaging.client.consumed.messages"), "nothing consumed")
	require.Zero(t, histogramCount(t, rm, "messaging.process.duration"))
	require.Positive(t, histogramCount(t, rm, "bunqueue.claim.duration", destination(name)), "empty claims are timed")
}

// The trace context stored with a job carries everything the propagator
// injects: W3C baggage too, which may reach 8192 bytes. A large one must
// neither fail Enqueue nor cost the job its link to the send span.
func TestTracingEnqueueWithLargeBaggage(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	tel := newTelBundle(t)
	cfg := bunqueue.Config{
		JobQueues:   map[string]bunqueue.JobQueueConfig{queue: {}},
		Propagators: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	c := tel.client(t, db, cfg)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))

	var members []baggage.Member
	for i := range 3 {
		m, err := baggage.NewMember(fmt.Sprintf("k%d", i), strings.Repeat("v", 600))
		require.NoError(t, err)
		members = append(members, m)
	}
	bag, err := baggage.New(members...)
	require.NoError(t, err)
	require.Greater(t, len(bag.String()), 1024)
	// Many jobs: the order of the stored lines varies from one to the next.
	var ids []string
	for range 32 {
		ctx, req := tel.request(baggage.ContextWithBaggage(t.Context(), bag))
		res, err := c.Enqueue(ctx, db, tracedArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
		req.End()
		require.NoError(t, err, "Enqueue with %d bytes of baggage", len(bag.String()))
		ids = append(ids, strconv.FormatInt(res.ID, 10))
	}
	start(t, c)
	for _, id := range ids {
		send := waitSpan(t, tel.spans, spanAll(spanNamed("send "+queue), spanHas("messaging.message.id", id)), "send span")
		proc := waitSpan(t, tel.spans, jobProcessOf(queue, id), "process span")
		require.True(t, linksTo(proc, send.SpanContext), "job %s: the process span links to its send span: %v", id, proc.Links)
	}
}

// messaging.message.id is the job's id on the send span and on the process
// spans of both modes, so that a consumer's span can be matched with the
// producer's.
func TestTracingJobMessageIDIsTheJobID(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			queue := ownJobQueue(t, db)
			tel := newTelBundle(t)
			c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode}}})
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](tracedWorker)))
			id := enqueueTraced(t, c, db, queue, tracedArgs{}, 0)
			send := waitSpan(t, tel.spans, spanNamed("send "+queue), "send span")
			requireAttrs(t, send, map[string]any{"messaging.message.id": id})
			start(t, c)
			proc := waitSpan(t, tel.spans, jobProcessOf(queue, id), "process span")
			requireAttrs(t, proc, map[string]any{"messaging.message.id": id})
		})
	}
}
