package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Depth is a queue whose depth the bunqueue.queue.depth gauge observes:
// its name, and how to count its waiting items up to a limit.
type Depth struct {
	Queue string
	Count func(ctx context.Context, limit int) (int, error)
}

// ObserveDepth registers the queue depth gauge: at each collection, one
// count per queue, capped at limit, not one per worker. A count that
// fails is logged through log at DEBUG and skipped.
func (t *Telemetry) ObserveDepth(queues []Depth, limit int, log *slog.Logger) (metric.Registration, error) {
	gauge, err := t.meter.Int64ObservableGauge("bunqueue.queue.depth", metric.WithUnit("{message}"),
		metric.WithDescription("Items waiting in the queue and not locked, counted up to QueueDepthLimit."))
	if err != nil {
		return nil, err
	}
	return t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, q := range queues {
			n, err := q.Count(ctx, limit)
			if err != nil {
				log.DebugContext(ctx, "bunqueue: queue depth", "queue", q.Queue, "error", err)
				continue
			}
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(semconv.MessagingDestinationName(q.Queue)))
		}
		return nil
	}, gauge)
}
