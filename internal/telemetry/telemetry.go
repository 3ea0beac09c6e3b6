// Package telemetry makes bunqueue's OpenTelemetry spans and metrics: the
// spans of claim transactions, items, statements prepared outside bun and
// sends, the trace context stored with a job, and the instruments every
// queue records. It calls only the OpenTelemetry API; what it needs of
// bunqueue (its version, how to name an error's type) it is given.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName is the scope of bunqueue's spans and metrics: its
// import path.
const InstrumentationName = "github.com/bunqueue/bunqueue"

// AttrOutcome is the attribute of what became of an item, one of the
// Outcome values: the key of bunqueue.AttrOutcome.
const AttrOutcome = attribute.Key("bunqueue.outcome")

// Outcomes of an item, the values of AttrOutcome.
const (
	OutcomeCompleted = "completed"
	OutcomeRetried   = "retried"
	OutcomeSnoozed   = "snoozed"
	OutcomeCancelled = "cancelled"
	OutcomeFailed    = "failed"
	OutcomeReleased  = "released" // back in the queue unchanged
)

// Config is what New needs: the providers (nil: the otel globals) and
// how spans are made.
type Config struct {
	// TracerProvider, MeterProvider and Propagators make the spans, the
	// metrics and the stored trace contexts; nil falls back to the otel
	// globals, and a global propagator that propagates nothing to W3C
	// trace context.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagators    propagation.TextMapPropagator
	// ParentSpans makes an item's span a child of its creation context
	// rather than a span linked to it.
	ParentSpans bool
	// Version is bunqueue's version, the instrumentation scope's.
	Version string
	// ErrorType names the error.type of an error: the caller knows its
	// own wrappers.
	ErrorType func(error) string
}

// Telemetry holds a client's tracer, propagator and instruments.
type Telemetry struct {
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	parent    bool
	meter     metric.Meter
	errorType func(error) string

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

// QueueSet returns the option of the attributes of queue's metrics, with
// the outcome if it is not "".
func (t *Telemetry) QueueSet(queue, outcome string) metric.MeasurementOption {
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

// New returns the telemetry of cfg, with its instruments created.
func New(cfg Config) (*Telemetry, error) {
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
	t := &Telemetry{
		tracer:    tp.Tracer(InstrumentationName, trace.WithInstrumentationVersion(cfg.Version), trace.WithSchemaURL(semconv.SchemaURL)),
		prop:      prop,
		parent:    cfg.ParentSpans,
		meter:     mp.Meter(InstrumentationName, metric.WithInstrumentationVersion(cfg.Version), metric.WithSchemaURL(semconv.SchemaURL)),
		errorType: cfg.ErrorType,
	}
	if err := t.instruments(); err != nil {
		return nil, fmt.Errorf("bunqueue: create metrics: %w", err)
	}
	return t, nil
}

// instruments creates t's histograms and counters.
func (t *Telemetry) instruments() error {
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
	return errors.Join(errs...)
}

// RecordClaim records in bunqueue.claim.duration a claim of queue that
// began at began.
func (t *Telemetry) RecordClaim(ctx context.Context, queue string, began time.Time) {
	t.claimDuration.Record(ctx, time.Since(began).Seconds(), t.QueueSet(queue, ""))
}

// RecordWait records in bunqueue.job.wait that a job of queue started d
// after it became due.
func (t *Telemetry) RecordWait(ctx context.Context, queue string, d time.Duration) {
	t.waitDuration.Record(ctx, d.Seconds(), t.QueueSet(queue, ""))
}

// CountTxRetry counts in bunqueue.transaction.retries one transaction run
// again, with the attributes of opts.
func (t *Telemetry) CountTxRetry(ctx context.Context, opts ...metric.AddOption) {
	t.txRetries.Add(ctx, 1, opts...)
}
