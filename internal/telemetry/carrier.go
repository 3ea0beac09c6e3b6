package telemetry

import (
	"bytes"
	"context"
	"sort"

	"go.opentelemetry.io/otel/propagation"
)

// TraceContextMax is the size of the trace_context column, the most that
// Inject returns.
const TraceContextMax = 1024

// Inject returns the carrier of ctx's trace context, encoded as
// "key=value" lines, or nil when ctx carries none.
func (t *Telemetry) Inject(ctx context.Context) []byte {
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
		if len(b)+len(k)+len(carrier[k])+2 > TraceContextMax {
			continue
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, carrier[k]...)
		b = append(b, '\n')
	}
	return b
}

// Extract is the inverse of Inject: the context of the trace context b
// carries, or context.Background().
func (t *Telemetry) Extract(b []byte) context.Context {
	ctx := context.Background()
	if len(b) == 0 {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if i := bytes.IndexByte(line, '='); i > 0 {
			carrier[string(line[:i])] = string(line[i+1:])
		}
	}
	return t.prop.Extract(ctx, carrier)
}
