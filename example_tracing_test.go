package bunqueue_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bunqueue/bunqueue"
)

// spanRecorder is a trace.TracerProvider that keeps the name, kind and
// links of each span that ends, and does nothing else: enough to show
// which spans bunqueue makes. An app passes the OpenTelemetry SDK's
// TracerProvider instead, or leaves Config.TracerProvider nil for otel's
// global one.
type spanRecorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	ended []*recordedSpan
}

// Tracer implements trace.TracerProvider.
func (r *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{r: r}
}

type recordingTracer struct {
	embedded.Tracer
	r *spanRecorder
}

// Start implements trace.Tracer.
func (t recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recordedSpan{r: t.r, name: name, kind: cfg.SpanKind(), links: cfg.Links()}
	return trace.ContextWithSpan(ctx, s), s
}

type recordedSpan struct {
	noop.Span // the rest of trace.Span, doing nothing
	r         *spanRecorder
	name      string
	kind      trace.SpanKind
	links     []trace.Link
}

// SetName, AddLink and End implement trace.Span; bunqueue names a claim
// that found nothing "receive {queue}", and links a batch to each item's
// creation context once it has claimed them.
func (s *recordedSpan) SetName(name string)  { s.name = name }
func (s *recordedSpan) AddLink(l trace.Link) { s.links = append(s.links, l) }
func (s *recordedSpan) End(...trace.SpanEndOption) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.ended = append(s.r.ended, s)
}

// A row of the app's own table can carry the trace context of the request
// that made it: the app stores TraceParent(ctx) in a column named by
// QueueConfig.TraceColumn, and the row's CONSUMER span "process {queue}"
// links to that request's span. (Jobs carry theirs without a column:
// Enqueue's PRODUCER span "send {queue}" is stored with the job.)
func ExampleTraceParent() {
	type Order struct {
		bun.BaseModel `bun:"table:bq_example_traced"`
		ID            int64 `bun:",pk"`
		Shipped       bool
		Traceparent   string
	}
	ctx := context.Background()
	db := openExampleDB("bq_example_traced", "id BIGINT PRIMARY KEY, shipped BOOL NOT NULL DEFAULT FALSE, traceparent VARCHAR(55) NOT NULL, INDEX (shipped, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_traced")

	// The span of the HTTP request that places the order, as otelhttp
	// would start it.
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	request := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	fmt.Println("traceparent:", bunqueue.TraceParent(request))
	if _, err := db.NewInsert().Model(&Order{ID: 1, Traceparent: bunqueue.TraceParent(request)}).Exec(request); err != nil {
		log.Fatal(err)
	}

	spans := &spanRecorder{}
	orders := bunqueue.NewQueue("bq_example_orders",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("shipped = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, o *Order) error {
			// ctx carries the process span: SQL spans (bunotel) nest under it.
			_, err := tx.NewUpdate().Model(o).Set("shipped = TRUE").WherePK().Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[Order]{TraceColumn: "traceparent"})
	client, err := bunqueue.NewClient(db, &bunqueue.Config{TracerProvider: spans})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Add(orders); err != nil {
		log.Fatal(err)
	}
	if _, err := orders.ProcessNext(ctx); err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.ended {
		fmt.Printf("%s (%s)\n", s.name, s.kind)
		for _, l := range s.links {
			fmt.Println("  linked to trace", l.SpanContext.TraceID(), "span", l.SpanContext.SpanID())
		}
	}
	// Output:
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// process bq_example_orders (consumer)
	//   linked to trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7
}
