package telemetry

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A stored trace context reads back as the span context it was made
// from; baggage too large for the column is dropped, never the link.
func TestInjectExtract(t *testing.T) {
	t.Parallel()
	tel, err := New(Config{Propagators: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})})
	require.NoError(t, err)
	require.Nil(t, tel.Inject(context.Background()), "no trace context")
	require.Equal(t, context.Background(), tel.Extract(nil))

	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	b := tel.Inject(ctx)
	require.Equal(t, "traceparent=00-01000000000000000000000000000000-0200000000000000-01\n", string(b))
	require.Equal(t, sc, trace.SpanContextFromContext(tel.Extract(b)))

	m, err := baggage.NewMember("big", strings.Repeat("x", TraceContextMax))
	require.NoError(t, err)
	bag, err := baggage.New(m)
	require.NoError(t, err)
	b = tel.Inject(baggage.ContextWithBaggage(ctx, bag))
	require.LessOrEqual(t, len(b), TraceContextMax)
	require.Equal(t, sc, trace.SpanContextFromContext(tel.Extract(b)), "the link kept, the baggage dropped")
}
