package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/extra/bunotel"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/bunqueue/bunqueue"
)

// serviceName is the service the app's spans are reported under, unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const serviceName = "signup"

// tracing is the app's OpenTelemetry setup: an SDK tracer provider that
// exports spans by OTLP/HTTP, and the W3C trace-context propagator. A nil
// *tracing means tracing is off: its methods then change nothing.
type tracing struct {
	tp   *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
}

// tracingEnabled reports whether the environment asks for traces to be
// exported: the OTLP exporter's endpoint variables, which it reads itself
// (OTEL_EXPORTER_OTLP_ENDPOINT, e.g. http://127.0.0.1:4318, or the
// traces-only OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
func tracingEnabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// setupTracing returns nil, and creates nothing, unless tracingEnabled.
// Otherwise it creates the exporter (configured by the standard
// OTEL_EXPORTER_OTLP_* variables: endpoint, headers, timeout…) and a tracer
// provider that batches spans to it, and installs the provider and the
// W3C trace-context propagator as the otel globals, for instrumentation
// that is not given them explicitly. Call shutdown before exiting, so that
// the last spans are sent.
func setupTracing(ctx context.Context) (*tracing, error) {
	if !tracingEnabled() {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later detectors win: the environment (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES) overrides the default service name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	t := &tracing{
		tp: sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithResource(res),
		),
		prop: propagation.TraceContext{},
	}
	otel.SetTracerProvider(t.tp)
	otel.SetTextMapPropagator(t.prop)
	return t, nil
}

// configure gives the client's config the tracer provider and propagator,
// so that Enqueue makes "send {queue}" spans and stores their context with
// the job, and workers make "process {queue}" spans linked to them.
func (t *tracing) configure(cfg *bunqueue.Config) {
	if t == nil {
		return
	}
	cfg.TracerProvider = t.tp
	cfg.Propagators = t.prop
}

// instrumentDB adds bun's OpenTelemetry hook to db: each SQL statement
// becomes a CLIENT span, a child of the span in its context (the HTTP
// request's, or a job's process span). dbName, if known, becomes the
// spans' db.name.
func (t *tracing) instrumentDB(db *bun.DB, dbName string) {
	if t == nil {
		return
	}
	opts := []bunotel.Option{bunotel.WithTracerProvider(t.tp)}
	if dbName != "" {
		opts = append(opts, bunotel.WithDBName(dbName))
	}
	db.AddQueryHook(bunotel.NewQueryHook(opts...))
}

// handler wraps h so that each request gets a SERVER span named after its
// route ("POST /signup"), a child of the caller's span if the request
// carries a W3C traceparent header.
func (t *tracing) handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, serviceName,
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.prop),
	)
}

// shutdown sends the spans not yet exported and stops the provider.
func (t *tracing) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// otlpEndpoint is where the exporter sends traces, for the log.
func otlpEndpoint() string {
	if e := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		return e
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}
