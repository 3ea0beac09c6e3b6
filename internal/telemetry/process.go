package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// queueAttrs are the attributes every span and metric of a queue carries.
func queueAttrs(queue string, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String("bunqueue"),
		semconv.MessagingDestinationName(queue),
		op,
		semconv.MessagingOperationName(name),
	}
}

// StartBatch starts the CONSUMER span of one claim transaction, a new
// root, before BEGIN, so that SQL spans nest under it.
func (t *Telemetry) StartBatch(ctx context.Context, queue string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "process "+queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithNewRoot(),
		trace.WithAttributes(queueAttrs(queue, semconv.MessagingOperationTypeProcess, "process")...))
}

// Claimed records the claim's size on the batch span; a claim that found
// nothing becomes a "receive" span.
func (t *Telemetry) Claimed(ctx context.Context, span trace.Span, queue string, n int, began time.Time) {
	t.RecordClaim(ctx, queue, began)
	if n == 0 {
		span.SetName("receive " + queue)
		span.SetAttributes(semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("receive"))
	}
	if n != 1 {
		span.SetAttributes(semconv.MessagingBatchMessageCount(n))
	}
}

// Item is the span of one item and what is known of it. Its caller sets
// Outcome, and Err if the item failed, before End.
type Item struct {
	// Ctx is the context of the item's span, for its handler.
	Ctx context.Context
	// Outcome is what became of the item, one of the Outcome values.
	Outcome string
	// Err is the item's error, nil if it succeeded.
	Err error

	span  trace.Span
	own   bool // false: the batch span itself, ended by the batch
	queue string
	began time.Time
}

// RateStart is the name of the event an item's span gets, in a queue
// with a RateLimit or KeyRate, at the instant the limit counted its
// start (see internal/limit's Cover): right before its handler.
const RateStart = "bunqueue.rate_limit.start"

// RateStarted adds the RateStart event at to the span of ctx, an item's.
func RateStarted(ctx context.Context, at time.Time) {
	trace.SpanFromContext(ctx).AddEvent(RateStart, trace.WithTimestamp(at))
}

// StartItem starts the span of one item. With n 0 (the rows of a batch
// handler, processed together) or in a batch of one, by default, the
// batch span is the item's span, linked to its creation context. Otherwise the item gets a span of its
// own: a child of the batch span with a link to the item's creation
// context, or, with Config.ParentSpans, a child of that context.
func (t *Telemetry) StartItem(ctx context.Context, batch trace.Span, queue string, n int, id string, creator context.Context, attrs ...attribute.KeyValue) *Item {
	attrs = append(attrs, semconv.MessagingMessageID(id))
	created := trace.SpanContextFromContext(creator)
	it := &Item{queue: queue, began: time.Now()}
	if n == 0 || n == 1 && !t.parent {
		it.Ctx, it.span = ctx, batch
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
	it.Ctx, it.span = t.tracer.Start(parent, "process "+queue, opts...)
	it.own = true
	return it
}

// End records the item's outcome on its span and in the metrics.
func (t *Telemetry) End(it *Item) {
	it.span.SetAttributes(AttrOutcome.String(it.Outcome))
	set := t.QueueSet(it.queue, it.Outcome)
	if it.Err != nil && it.Outcome != OutcomeSnoozed {
		typ := t.errorType(it.Err)
		it.span.SetAttributes(semconv.ErrorTypeKey.String(typ))
		it.span.RecordError(it.Err)
		it.span.SetStatus(codes.Error, it.Err.Error())
		set = metric.WithAttributes(semconv.MessagingDestinationName(it.queue), AttrOutcome.String(it.Outcome), semconv.ErrorTypeKey.String(typ))
		t.failed.Add(it.Ctx, 1, set)
	}
	if it.Outcome == OutcomeRetried {
		t.retried.Add(it.Ctx, 1, set)
	}
	t.consumed.Add(it.Ctx, 1, set)
	t.processDuration.Record(it.Ctx, time.Since(it.began).Seconds(), set)
	if it.own {
		it.span.End()
	}
}

// EndSpan ends a batch's or a statement's span, with its error if any.
func (t *Telemetry) EndSpan(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(t.errorType(err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartStatement starts the CLIENT span of a statement that bunqueue runs
// outside bun, as a statement prepared on the server, where bun's query
// hooks (bunotel's SQL spans) do not see it. op is the SQL operation, text
// the statement with its parameter markers.
func (t *Telemetry) StartStatement(ctx context.Context, system, op, table, text string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, op+" "+table, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.DBSystemNameKey.String(system),
		semconv.DBOperationName(op),
		semconv.DBCollectionName(table),
		semconv.DBQueryText(text),
	))
}
