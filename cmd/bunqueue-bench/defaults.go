package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bunqueue/bunqueue"
)

// defaultsPool is the connection pool of the defaults scenarios: roomy, so
// that whatever number of workers the defaults run, the pool is not what
// limits them.
const defaultsPool = 64

// tableDefaults runs the any-table queue with a nil *QueueConfig and a
// Config that sets only the logger.
func (b *bench) tableDefaults(ctx context.Context) (result, error) {
	n := b.backlog(8)
	st, err := b.runTable(ctx, tableRun{rows: n, pool: defaultsPool})
	if err != nil {
		return result{}, err
	}
	return result{
		ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Concurrency: max(st.conns, 1),
		Note: fmt.Sprintf("nil *QueueConfig: up to %d connection(s) in use (conns); ", st.conns) + st.note(n) +
			b.versus(st.rate, "of the best tuned per-item row,", "goal ≥ 0.80", "table-b1", "table-b50"),
	}, nil
}

// jobsDefaults runs a queue of the jobs table with a zero JobQueueConfig.
func (b *bench) jobsDefaults(ctx context.Context) (result, error) {
	n := b.backlog(4)
	st, err := b.runJobs(ctx, "bench_defaults", bunqueue.JobQueueConfig{}, n, defaultsPool)
	if err != nil {
		return result{}, err
	}
	return result{
		ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Concurrency: max(st.conns, 1),
		Note: fmt.Sprintf("zero JobQueueConfig: up to %d connection(s) in use (conns); ", st.conns) +
			backlogNote(n, "jobs enqueued", st.end >= int64(n)) +
			b.versus(st.rate, "of the best tuned lock-mode row,", "goal ≥ 0.80", "jobs-lock-b1", "jobs-lock-b50"),
	}, nil
}

// versus returns "; ×R what NAME (N/s; goal)" for the fastest of the
// named results this run has, or "" if it has none. R compares raw rates
// of scenarios run minutes apart: the ratios to their own ceilings, taken
// in short windows, were noisier than that on a loaded machine.
func (b *bench) versus(rate float64, what, goal string, names ...string) string {
	best, bestName := 0.0, ""
	for _, n := range names {
		if r, ok := b.results[n]; ok && r.ItemsPerSec > best {
			best, bestName = r.ItemsPerSec, n
		}
	}
	if best <= 0 {
		return ""
	}
	s := fmt.Sprintf("; ×%.2f %s %s (%.0f/s", rate/best, what, bestName, best)
	if goal != "" {
		s += "; " + goal
	}
	return s + ")"
}

// spanCounter is a span exporter that counts the spans and discards them.
type spanCounter struct{ n atomic.Int64 }

func (e *spanCounter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}

func (e *spanCounter) Shutdown(context.Context) error { return nil }

// tracingOn runs the table-b50 scenario with the OpenTelemetry SDK: every
// span sampled and batched to an exporter that counts and discards it, and
// SDK meters read by a manual reader. (table-b50 runs with the global
// providers, no-ops unless a program sets them.)
func (b *bench) tracingOn(ctx context.Context) (result, error) {
	n := b.backlog(8)
	var spans spanCounter
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.scene.watch(reader, mp) // read, then shut down, once the scenario is over
	st, err := b.runTable(ctx, tableRun{
		rows:  n,
		cfg:   &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 50},
		setup: func(cfg *bunqueue.Config) { cfg.TracerProvider, cfg.MeterProvider = tp, mp },
	})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = tp.Shutdown(sctx) // exports what is left
	if err != nil {
		return result{}, err
	}
	note := fmt.Sprintf("SDK: every span sampled, batch span processor to a discarding exporter (%d spans, %.2f per item processed), SDK meters with a manual reader; ",
		spans.n.Load(), float64(spans.n.Load())/float64(max(st.total, 1))) + st.note(n) +
		b.versus(st.rate, "of", "tracing off; goal ≥ 0.90", "table-b50") + b.cpuCost("table-b50")
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: note}, nil
}

// cpuCost compares the CPU per item of the window just measured with that
// of the scenario named base. Tracing costs CPU in this process only; on a
// machine whose CPUs run both the client and the server flat out, the rate
// goes as the inverse of the CPU an item costs both, so the client's extra
// CPU per item, over the two's CPU per item without it, is the rate it
// costs. That reads through the noise of a shared machine better than the
// two rates do.
func (b *bench) cpuCost(base string) string {
	r, ok := b.results[base]
	c := b.last.client
	if !ok || r.ClientCPU == nil || c == nil {
		return ""
	}
	s := fmt.Sprintf("; client CPU %+.1f µs per item (%.1f → %.1f)", *c-*r.ClientCPU, *r.ClientCPU, *c)
	if r.ServerCPU != nil {
		both := *r.ClientCPU + *r.ServerCPU
		s += fmt.Sprintf(": ×%.2f of %s's rate at its CPU per item, client and server (%.0f µs)", both/(both+*c-*r.ClientCPU), base, both)
	}
	return s
}
