package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName is the scope of bunqueue's spans and metrics.
const instrumentationName = "github.com/bunqueue/bunqueue"

// Span and metric attributes of bunqueue's own.
const (
	// AttrOutcome is what became of an item: completed, retried, snoozed,
	// cancelled, failed (for good, or recorded by OnError), or released
	// (back in the queue unchanged).
	AttrOutcome = attribute.Key("bunqueue.outcome")
	// AttrAttempt is the attempt number of a job.
	AttrAttempt = attribute.Key("bunqueue.job.attempt")
	// AttrKind is the kind of a job.
	AttrKind = attribute.Key("bunqueue.job.kind")
)

// Outcomes of an item, the values of AttrOutcome.
const (
	outcomeCompleted = "completed"
	outcomeRetried   = "retried"
	outcomeSnoozed   = "snoozed"
	outcomeCancelled = "cancelled"
	outcomeFailed    = "failed"
	outcomeReleased  = "released"
)

// telemetry holds a client's tracer, propagator and instruments.
type telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	parent bool
	meter  metric.Meter

	processDuration metric.Float64Histogram
	consumed        metric.Int64Counter
	sent            metric.Int64Counter
	failed          metric.Int64Counter
	retried         metric.Int64Counter
	claimDuration   metric.Float64Histogram
	waitDuration    metric.Float64Histogram
	txRetries       metric.Int64Counter

	// sets are the measurement options of the attribute sets that every
	// item's metrics carry (its queue, its outcome), by setKey: a set
	// built anew sorts and allocates, for every item, even when the
	// meter records nothing.
	sets sync.Map
}

// setKey names a cached attribute set: a queue and an outcome ("" for
// none).
type setKey struct{ queue, outcome string }

// queueSet returns the option of the attributes of queue's metrics, with
// the outcome if it is not "".
func (t *telemetry) queueSet(queue, outcome string) metric.MeasurementOption {
	k := setKey{queue, outcome}
	if o, ok := t.sets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	attrs := []attribute.KeyValue{semconv.MessagingDestinationName(queue)}
	if outcome != "" {
		attrs = append(attrs, AttrOutcome.String(outcome))
	}
	o, _ := t.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.MeasurementOption)
}

func newTelemetry(cfg Config) (*telemetry, error) {
	tp, mp, prop := cfg.TracerProvider, cfg.MeterProvider, cfg.Propagators
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if prop == nil {
		prop = otel.GetTextMapPropagator()
		if len(prop.Fields()) == 0 {
			prop = propagation.TraceContext{}
		}
	}
	t := &telemetry{
		tracer: tp.Tracer(instrumentationName, trace.WithInstrumentationVersion(version), trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   prop,
		parent: cfg.ParentProcessSpans,
		meter:  mp.Meter(instrumentationName, metric.WithInstrumentationVersion(version), metric.WithSchemaURL(semconv.SchemaURL)),
	}
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := t.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := t.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	t.processDuration = hist("messaging.process.duration", "Duration of processing one item: its handler or worker, in its transaction.")
	t.claimDuration = hist("bunqueue.claim.duration", "Duration of one claim: BEGIN and the locking SELECT (or the lease UPDATE).")
	t.waitDuration = hist("bunqueue.job.wait", "Time from when a job became due (its run_at) to when its worker started it.")
	t.consumed = counter("messaging.client.consumed.messages", "{message}", "Items claimed and handed to a handler or worker.")
	t.sent = counter("messaging.client.sent.messages", "{message}", "Jobs enqueued.")
	t.failed = counter("bunqueue.items.failed", "{message}", "Items whose handler or worker failed, whatever happened next.")
	t.retried = counter("bunqueue.items.retried", "{message}", "Jobs scheduled for another attempt after a failure.")
	t.txRetries = counter("bunqueue.transaction.retries", "{retry}", "Transactions run again after a deadlock (1213) or lock wait timeout (1205).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bunqueue: create metrics: %w", err)
	}
	return t, nil
}

// queueAttrs are the attributes every span and metric of a queue carries.
func queueAttrs(queue string, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String("bunqueue"),
		semconv.MessagingDestinationName(queue),
		op,
		semconv.MessagingOperationName(name),
	}
}

// startBatch starts the CONSUMER span of one claim transaction, a new
// root, before BEGIN, so that SQL spans nest under it.
func (t *telemetry) startBatch(ctx context.Context, queue string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "process "+queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithNewRoot(),
		trace.WithAttributes(queueAttrs(queue, semconv.MessagingOperationTypeProcess, "process")...))
}

// claimed records the claim's size on the batch span; a claim that found
// nothing becomes a "receive" span.
func (t *telemetry) claimed(ctx context.Context, span trace.Span, queue string, n int, began time.Time) {
	t.claimDuration.Record(ctx, time.Since(began).Seconds(), t.queueSet(queue, ""))
	if n == 0 {
		span.SetName("receive " + queue)
		span.SetAttributes(semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("receive"))
	}
	if n != 1 {
		span.SetAttributes(semconv.MessagingBatchMessageCount(n))
	}
}

// itemSpan is the span of one item and what is known of it.
type itemSpan struct {
	ctx     context.Context
	span    trace.Span
	own     bool // false: the batch span itself, ended by the batch
	queue   string
	began   time.Time
	outcome string
	err     error
}

// startItem starts the span of one item. With n 0 (the rows of a batch
// handler, processed together) or in a batch of one, by default, the
// batch span is the item's span, linked to its creation context. Otherwise the item gets a span of its
// own: a child of the batch span with a link to the item's creation
// context, or, with Config.ParentProcessSpans, a child of that context.
func (t *telemetry) startItem(ctx context.Context, batch trace.Span, queue string, n int, id string, creator context.Context, attrs ...attribute.KeyValue) *itemSpan {
	attrs = append(attrs, semconv.MessagingMessageID(id))
	created := trace.SpanContextFromContext(creator)
	it := &itemSpan{queue: queue, began: time.Now()}
	if n == 0 || n == 1 && !t.parent {
		it.ctx, it.span = ctx, batch
		if n == 1 {
			batch.SetAttributes(attrs...)
		}
		if created.IsValid() {
			batch.AddLink(trace.Link{SpanContext: created})
		}
		return it
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(queueAttrs(queue, semconv.MessagingOperationTypeProcess, "process")...),
		trace.WithAttributes(attrs...),
	}
	parent := ctx
	switch {
	case t.parent && created.IsValid():
		parent = trace.ContextWithSpanContext(ctx, created)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()}))
	case created.IsValid():
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created}))
		if n > 1 {
			batch.AddLink(trace.Link{SpanContext: created})
		}
	}
	it.ctx, it.span = t.tracer.Start(parent, "process "+queue, opts...)
	it.own = true
	return it
}

// end records the item's outcome on its span and in the metrics.
func (t *telemetry) end(it *itemSpan) {
	it.span.SetAttributes(AttrOutcome.String(it.outcome))
	set := t.queueSet(it.queue, it.outcome)
	if it.err != nil && it.outcome != outcomeSnoozed {
		typ := errorType(it.err)
		it.span.SetAttributes(semconv.ErrorTypeKey.String(typ))
		it.span.RecordError(it.err)
		it.span.SetStatus(codes.Error, it.err.Error())
		set = metric.WithAttributes(semconv.MessagingDestinationName(it.queue), AttrOutcome.String(it.outcome), semconv.ErrorTypeKey.String(typ))
		t.failed.Add(it.ctx, 1, set)
	}
	if it.outcome == outcomeRetried {
		t.retried.Add(it.ctx, 1, set)
	}
	t.consumed.Add(it.ctx, 1, set)
	t.processDuration.Record(it.ctx, time.Since(it.began).Seconds(), set)
	if it.own {
		it.span.End()
	}
}

// endSpan ends a batch's or a statement's span, with its error if any.
func (t *telemetry) endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startStatement starts the CLIENT span of a statement that bunqueue runs
// outside bun, as a statement prepared on the server, where bun's query
// hooks (bunotel's SQL spans) do not see it. op is the SQL operation, text
// the statement with its parameter markers.
func (t *telemetry) startStatement(ctx context.Context, system, op, table, text string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, op+" "+table, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.DBSystemNameKey.String(system),
		semconv.DBOperationName(op),
		semconv.DBCollectionName(table),
		semconv.DBQueryText(text),
	))
}

// errorType is the error.type of err: the Go type of the innermost cause
// that is not a bunqueue wrapper.
func errorType(err error) string {
	var ie *ItemError
	if errors.As(err, &ie) && ie.Err != nil {
		err = ie.Err
	}
	var pe *PanicError
	var ce *cancelError
	switch {
	case errors.Is(err, ErrStillQueued):
		return "still_queued"
	case errors.As(err, &pe):
		return "panic"
	case errors.As(err, &ce):
		err = ce.err
	}
	for {
		next := errors.Unwrap(err)
		if next == nil || reflect.TypeOf(err).String() != "*fmt.wrapError" {
			break
		}
		err = next
	}
	return reflect.TypeOf(err).String()
}

// inject returns the carrier of ctx's trace context, encoded as
// "key=value" lines, or nil when ctx carries none.
func (t *telemetry) inject(ctx context.Context) []byte {
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	// traceparent first, then the rest in a stable order, as many as fit
	// the column (baggage can be large: it is dropped before the link).
	keys := carrier.Keys()
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "traceparent") != (keys[j] == "traceparent") {
			return keys[i] == "traceparent"
		}
		return keys[i] < keys[j]
	})
	var b []byte
	for _, k := range keys {
		if len(b)+len(k)+len(carrier[k])+2 > traceContextMax {
			continue
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, carrier[k]...)
		b = append(b, '\n')
	}
	return b
}

// traceContextMax is the size of the trace_context column.
const traceContextMax = 1024

// extract is the inverse of inject.
func (t *telemetry) extract(b []byte) context.Context {
	ctx := context.Background()
	if len(b) == 0 {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	for len(b) > 0 {
		line := b
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if i := indexByte(line, '='); i > 0 {
			carrier[string(line[:i])] = string(line[i+1:])
		}
	}
	return t.prop.Extract(ctx, carrier)
}

// extractTraceParent reads a bare W3C traceparent value.
func extractTraceParent(s string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// there is none. Store it in a queue's QueueConfig.TraceColumn when the app
// inserts the row, so that the row's process span links back to the
// request that made it.
func TraceParent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// startSend starts the PRODUCER span of an Enqueue or EnqueueMany call
// through db. Through a bun.Tx, the span may end with the transaction:
// see pendingSend.
func (t *telemetry) startSend(ctx context.Context, db bun.IDB, jobs []EnqueueParams) (context.Context, trace.Span) {
	queue := ""
	for i, p := range jobs {
		q := QueueDefault
		if p.Opts != nil && p.Opts.Queue != "" {
			q = p.Opts.Queue
		}
		if i > 0 && q != queue {
			queue = ""
			break
		}
		queue = q
	}
	name := "send"
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("bunqueue"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	}
	if queue != "" {
		name += " " + queue
		attrs = append(attrs, semconv.MessagingDestinationName(queue))
	}
	if len(jobs) != 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(jobs)))
	} else if jobs[0].Args != nil {
		attrs = append(attrs, AttrKind.String(jobs[0].Args.Kind()))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	switch db.(type) {
	case bun.Tx, *bun.Tx:
		ctx = context.WithValue(ctx, sendKey{}, &pendingSend{})
	}
	return ctx, span
}

// endSend ends a send span and counts the jobs sent. A send that the query
// hook tied to its transaction ends when the transaction does (wakehook.go).
func (t *telemetry) endSend(ctx context.Context, span trace.Span, jobs []EnqueueParams, duplicate bool, err error) {
	if err == nil && holdSend(ctx, func(end sendEnd) { t.finishSend(ctx, span, jobs, duplicate, end) }) {
		return
	}
	t.finishSend(ctx, span, jobs, duplicate, sendEnd{err: err})
}

// errorTypeRolledBack is the error.type of a send whose transaction
// rolled back.
const errorTypeRolledBack = "rolled_back"

// finishSend ends a send span as end says.
func (t *telemetry) finishSend(ctx context.Context, span trace.Span, jobs []EnqueueParams, duplicate bool, end sendEnd) {
	switch err := end.err; {
	case end.rolledBack:
		span.SetAttributes(semconv.ErrorTypeKey.String(errorTypeRolledBack))
		span.SetStatus(codes.Error, "the transaction rolled back: the job was never enqueued")
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		if duplicate {
			span.SetAttributes(attribute.Bool("bunqueue.job.duplicate", true))
		}
		for _, p := range jobs {
			q := QueueDefault
			if p.Opts != nil && p.Opts.Queue != "" {
				q = p.Opts.Queue
			}
			t.sent.Add(ctx, 1, metric.WithAttributes(semconv.MessagingDestinationName(q)))
		}
	}
	span.End()
}

// observeDepth registers the queue depth gauge: at each collection, one
// capped count per queue (at most QueueDepthLimit), not one per worker.
func (t *telemetry) observeDepth(runners []*runner, log *slog.Logger) (metric.Registration, error) {
	gauge, err := t.meter.Int64ObservableGauge("bunqueue.queue.depth", metric.WithUnit("{message}"),
		metric.WithDescription("Items waiting in the queue and not locked, counted up to QueueDepthLimit."))
	if err != nil {
		return nil, err
	}
	return t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, r := range runners {
			if r.queueEngine == nil {
				continue
			}
			var n int
			err := contain(ctx, func() (err error) { // the count runs the queue's query function
				n, err = r.depth(ctx, QueueDepthLimit)
				return err
			})
			if err != nil {
				log.DebugContext(ctx, "bunqueue: queue depth", "queue", r.name, "error", err)
				continue
			}
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(semconv.MessagingDestinationName(r.name)))
		}
		return nil
	}, gauge)
}

// QueueDepthLimit caps the count behind the bunqueue.queue.depth gauge, so
// that a collection stays cheap on a large backlog. The count locks the
// rows it counts, skipping locked ones, for one statement.
const QueueDepthLimit = 10000
