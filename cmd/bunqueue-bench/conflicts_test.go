package main

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bunqueue/bunqueue"
)

func TestIDSet(t *testing.T) {
	t.Parallel()
	var s idSet
	for _, id := range []int64{0, 1, 63, 64, idPageBits - 1, idPageBits, 5 * idPageBits, -1, 1 << 40} {
		require.True(t, s.add(id), "%d: first add", id)
		require.False(t, s.add(id), "%d: second add", id)
	}
	require.True(t, s.add(2), "a neighbour of 1 and 63 is not in the set")
	require.Len(t, s.pages, 5, "ids share pages: 0…65535, 65536…, 5×65536…, -1 and 2^40 each their own")
}

// TestTally checks, from many goroutines, that each item counts once in
// done and every later run of its handler once in the re-runs, across the
// tallies of one scenario.
func TestTally(t *testing.T) {
	t.Parallel()
	b := newBench(defaultDSN, io.Discard)
	first, second := b.newTally(), b.newTally()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for id := range int64(1000) {
				if g%2 == 0 {
					first.ran(id)
				} else {
					second.ran(id)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1000, first.done.Load()+second.done.Load())
	require.EqualValues(t, 1000, b.scene.handled.Load())
	require.EqualValues(t, 7000, b.scene.reruns.Load())
}

// TestConflictsCount checks that what a scenario's clients count of their
// conflicts reaches its row: the retries counter of every client's
// MeterProvider, the other instruments dropped, and the failed batches
// they log, which the bench's logger still shows.
func TestConflictsCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var out bytes.Buffer
	b := newBench(defaultDSN, &out)
	for range 2 { // two clients of one scenario
		cfg := b.config(bunqueue.Config{})
		cfg.Logger.With("queue", "q").Error(batchFailedMessage, "error", "Error 1213")
		cfg.Logger.Error("bunqueue: item failed")
		cfg.Logger.Debug("bunqueue: retrying transaction")
		meter := cfg.MeterProvider.Meter("github.com/bunqueue/bunqueue")
		retries, err := meter.Int64Counter(retriesMetric)
		require.NoError(t, err)
		retries.Add(ctx, 2)
		retries.Add(ctx, 1, metric.WithAttributes(attribute.String("messaging.destination.name", "q")))
		other, err := meter.Int64Counter("bunqueue.items.failed")
		require.NoError(t, err)
		other.Add(ctx, 5)
	}
	b.newTally().ran(7)
	b.newTally().ran(7)
	b.scene.addChild(childReport{TxRetries: 4, FailedBatches: 1, Handled: 3, Reruns: 1})

	var r result
	require.NoError(t, b.scene.fill(ctx, &r))
	require.NotNil(t, r.TxRetries)
	require.EqualValues(t, 2*3+4, *r.TxRetries)
	require.EqualValues(t, 2+1, *r.FailedBatches)
	require.EqualValues(t, 1+3, *r.Handled)
	require.EqualValues(t, 1+1, *r.Reruns)
	require.InDelta(t, 0.5, *r.RerunShare, 1e-9)
	require.Contains(t, out.String(), batchFailedMessage, "the failed batches are still logged")
	require.NotContains(t, out.String(), "retrying transaction", "the bench's logger shows warnings and errors only")

	// A plain-SQL scenario's row has no such columns, though a client
	// enqueued its backlog.
	b.scene = &conflicts{}
	b.config(bunqueue.Config{})
	var plain result
	require.NoError(t, b.scene.fill(ctx, &plain))
	require.Nil(t, plain.TxRetries)
	require.Nil(t, plain.Reruns)
}
