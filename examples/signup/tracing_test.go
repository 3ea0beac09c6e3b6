package main

// These tests are not parallel: they set environment variables and the
// otel globals, as main does. (Go runs the parallel tests of the package
// after them.)

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bunqueue/bunqueue"
)

func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tel, err := setupTracing(t.Context())
	if tel != nil || err != nil {
		t.Fatalf("setupTracing without an endpoint: got %v, %v; want nil, nil", tel, err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Error("setupTracing without an endpoint installed an SDK tracer provider")
	}
	// A nil *tracing changes nothing.
	mux := http.NewServeMux()
	if h := tel.handler(mux); h != http.Handler(mux) {
		t.Error("handler wrapped the mux")
	}
	cfg := &bunqueue.Config{}
	tel.configure(cfg)
	if cfg.TracerProvider != nil || cfg.Propagators != nil {
		t.Errorf("configure set %v, %v", cfg.TracerProvider, cfg.Propagators)
	}
	tel.instrumentDB(nil, "") // does not touch the db
	if err := tel.shutdown(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestTracesOfASignup exports the traces of one signup, as main sets them
// up, to an OTLP/HTTP receiver, on each server, and checks the story: the request's SERVER
// span with its SQL and the send span in one trace; the job's process span
// linked to (or, with Config.ParentProcessSpans, a child of) the send
// span, with the worker's SQL inside.
func TestTracesOfASignup(t *testing.T) {
	rc := &otlpReceiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")

	tel, err := setupTracing(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tel == nil {
		t.Fatal("setupTracing with OTEL_EXPORTER_OTLP_ENDPOINT set: tracing is off")
	}
	t.Cleanup(func() { // after the app's cleanups
		_ = tel.shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	if otel.GetTracerProvider() != tel.tp {
		t.Error("the global tracer provider is not the app's")
	}

	// On each server in turn (not in parallel: the environment and the
	// otel globals are the test's), with a jobs queue of its own, which
	// check looks for.
	for _, srv := range testServers() {
		t.Run(srv.name, func(t *testing.T) {
			a := newTracedTestApp(t, srv, tel)
			a.start()
			r := a.postForm("/signup", url.Values{"email": {a.email("ada")}, "name": {"Ada Lovelace"}})
			if r.status != http.StatusCreated {
				t.Fatalf("POST /signup: got %+v, want 201", r)
			}
			a.waitFor(10*time.Second, "the welcome email was not recorded", func() bool { return a.emailsSent(r.ID) > 0 })

			var story string
			deadline := time.Now().Add(10 * time.Second)
			for {
				if err := tel.tp.ForceFlush(t.Context()); err != nil {
					t.Fatal(err)
				}
				var missing string
				story, missing = rc.check(a.queue)
				if missing == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 10s, the exported spans lack %s. Got:\n%s", missing, rc.dump())
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Log(story)
		})
	}
}

// otlpReceiver is a minimal OTLP/HTTP trace receiver: it keeps the spans
// it is sent, with their resource's service.name.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []gotSpan
}

type gotSpan struct {
	service string
	*tracepb.Span
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				rc.spans = append(rc.spans, gotSpan{service, sp})
			}
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// check looks for the story of one signup whose job went to queue. It
// returns the story, or what is missing from it.
func (rc *otlpReceiver) check(queue string) (story, missing string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	byID := map[string]gotSpan{}
	for _, s := range rc.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		if s.service != serviceName {
			return "", fmt.Sprintf("service.name %q (span %q has %q)", serviceName, s.Name, s.service)
		}
	}
	// within reports whether s is anc or one of its descendants.
	within := func(s, anc gotSpan) bool {
		for seen := 0; seen < 100; seen++ {
			if bytes.Equal(s.SpanId, anc.SpanId) {
				return true
			}
			p, ok := byID[hex.EncodeToString(s.ParentSpanId)]
			if !ok {
				return false
			}
			s = p
		}
		return false
	}
	find := func(what string, ok func(gotSpan) bool) (gotSpan, bool) {
		for _, s := range rc.spans {
			if ok(s) {
				return s, true
			}
		}
		missing = what
		return gotSpan{}, false
	}
	sql := func(s gotSpan, stmt, table string) bool {
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			return false
		}
		q := strings.ToUpper(attr(s, "db.statement"))
		return strings.HasPrefix(q, stmt) && strings.Contains(q, strings.ToUpper(table))
	}

	// The send span of queue first: the spans of the other servers'
	// signups are here too.
	send, ok := find(fmt.Sprintf("a PRODUCER span %q", "send "+queue), func(s gotSpan) bool {
		return s.Kind == tracepb.Span_SPAN_KIND_PRODUCER && s.Name == "send "+queue
	})
	if !ok {
		return
	}
	server, ok := find(`a SERVER span "POST /signup" around the send span`, func(s gotSpan) bool {
		return s.Kind == tracepb.Span_SPAN_KIND_SERVER && s.Name == "POST /signup" && within(send, s)
	})
	if !ok {
		return
	}
	insert, ok := find("an INSERT INTO example_signup_user span inside the request's span", func(s gotSpan) bool {
		return sql(s, "INSERT", "example_signup_user") && within(s, server)
	})
	if !ok {
		return
	}
	process, ok := find(fmt.Sprintf("a CONSUMER span %q linked to (or a child of) the send span", "process "+queue), func(s gotSpan) bool {
		if s.Kind != tracepb.Span_SPAN_KIND_CONSUMER || s.Name != "process "+queue {
			return false
		}
		for _, l := range s.Links {
			if bytes.Equal(l.TraceId, send.TraceId) && bytes.Equal(l.SpanId, send.SpanId) {
				return true
			}
		}
		return within(s, send)
	})
	if !ok {
		return
	}
	worker, ok := find("an INSERT INTO example_signup_sent span inside the process span", func(s gotSpan) bool {
		return sql(s, "INSERT", "example_signup_sent") && within(s, process)
	})
	if !ok {
		return
	}
	return fmt.Sprintf("trace %x: %s > … %s, %s\ntrace %x: %s (links %d) > … %s",
		server.TraceId, server.Name, insert.Name, send.Name,
		process.TraceId, process.Name, len(process.Links), worker.Name), ""
}

// dump lists the spans received, for a failure message.
func (rc *otlpReceiver) dump() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var b strings.Builder
	for _, s := range rc.spans {
		fmt.Fprintf(&b, "  trace %x span %x parent %x links %d  %s %q %s\n",
			s.TraceId, s.SpanId, s.ParentSpanId, len(s.Links), s.Kind, s.Name, attr(s, "db.statement"))
	}
	return b.String()
}

// attr is the string value of a span attribute, or "".
func attr(s gotSpan, key string) string {
	for _, kv := range s.Attributes {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
