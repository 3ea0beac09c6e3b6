package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ErrorTypeRolledBack is the error.type of a send whose transaction
// rolled back.
const ErrorTypeRolledBack = "rolled_back"

// StartSend starts the PRODUCER span of an Enqueue or EnqueueMany call,
// of jobs to queues, one name a job; attrs are added to the span.
func (t *Telemetry) StartSend(ctx context.Context, queues []string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	queue := ""
	for i, q := range queues {
		if i > 0 && q != queue {
			queue = ""
			break
		}
		queue = q
	}
	name := "send"
	all := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("bunqueue"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	}
	if queue != "" {
		name += " " + queue
		all = append(all, semconv.MessagingDestinationName(queue))
	}
	if len(queues) != 1 {
		all = append(all, semconv.MessagingBatchMessageCount(len(queues)))
	}
	all = append(all, attrs...)
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(all...))
}

// EndSend ends a send span of jobs to queues, one name a job, and counts
// the jobs sent: unless the send failed with err, or its transaction
// rolled back. duplicate says that a job with its unique key was pending.
func (t *Telemetry) EndSend(ctx context.Context, span trace.Span, queues []string, duplicate, rolledBack bool, err error) {
	switch {
	case rolledBack:
		span.SetAttributes(semconv.ErrorTypeKey.String(ErrorTypeRolledBack))
		span.SetStatus(codes.Error, "the transaction rolled back: the job was never enqueued")
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(t.errorType(err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		if duplicate {
			span.SetAttributes(attribute.Bool("bunqueue.job.duplicate", true))
		}
		for _, q := range queues {
			t.sent.Add(ctx, 1, metric.WithAttributes(semconv.MessagingDestinationName(q)))
		}
	}
	span.End()
}
