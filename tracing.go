package bunqueue

import (
	"context"
	"errors"
	"reflect"

	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

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
	outcomeCompleted = telemetry.OutcomeCompleted
	outcomeRetried   = telemetry.OutcomeRetried
	outcomeSnoozed   = telemetry.OutcomeSnoozed
	outcomeCancelled = telemetry.OutcomeCancelled
	outcomeFailed    = telemetry.OutcomeFailed
	outcomeReleased  = telemetry.OutcomeReleased
)

// newTelemetry returns the telemetry of cfg's providers.
func newTelemetry(cfg Config) (*telemetry.Telemetry, error) {
	return telemetry.New(telemetry.Config{
		TracerProvider: cfg.TracerProvider,
		MeterProvider:  cfg.MeterProvider,
		Propagators:    cfg.Propagators,
		ParentSpans:    cfg.ParentProcessSpans,
		Version:        version,
		ErrorType:      errorType,
	})
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

// extractTraceParent reads a bare W3C traceparent value.
func extractTraceParent(s string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
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
func (c *Client) startSend(ctx context.Context, db bun.IDB, jobs []EnqueueParams) (context.Context, trace.Span) {
	var attrs []attribute.KeyValue
	if len(jobs) == 1 && jobs[0].Args != nil {
		attrs = append(attrs, AttrKind.String(jobs[0].Args.Kind()))
	}
	ctx, span := c.tel.StartSend(ctx, sendQueues(jobs), attrs...)
	switch db.(type) {
	case bun.Tx, *bun.Tx:
		ctx = context.WithValue(ctx, sendKey{}, &pendingSend{})
	}
	return ctx, span
}

// endSend ends a send span and counts the jobs sent. A send that the query
// hook tied to its transaction ends when the transaction does (wakehook.go).
func (c *Client) endSend(ctx context.Context, span trace.Span, jobs []EnqueueParams, duplicate bool, err error) {
	queues := sendQueues(jobs)
	if err == nil && holdSend(ctx, func(end sendEnd) { c.tel.EndSend(ctx, span, queues, duplicate, end.rolledBack, end.err) }) {
		return
	}
	c.tel.EndSend(ctx, span, queues, duplicate, false, err)
}

// sendQueues returns the queue of each of jobs.
func sendQueues(jobs []EnqueueParams) []string {
	queues := make([]string, len(jobs))
	for i, p := range jobs {
		queues[i] = QueueDefault
		if p.Opts != nil && p.Opts.Queue != "" {
			queues[i] = p.Opts.Queue
		}
	}
	return queues
}

// depthSources are the queues of runners that the depth gauge observes:
// those over the app's tables; a count runs the queue's query function,
// contained (see contain).
func depthSources(runners []*runner) []telemetry.Depth {
	var out []telemetry.Depth
	for _, r := range runners {
		if r.Work == nil {
			continue
		}
		out = append(out, telemetry.Depth{Queue: r.Name, Count: func(ctx context.Context, limit int) (n int, err error) {
			err = contain(ctx, func() (err error) {
				n, err = r.Depth(ctx, limit)
				return err
			})
			return n, err
		}})
	}
	return out
}

// QueueDepthLimit caps the count behind the bunqueue.queue.depth gauge, so
// that a collection stays cheap on a large backlog. The count locks the
// rows it counts, skipping locked ones, for one statement.
const QueueDepthLimit = 10000
