package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// This file counts, for each scenario, what lock conflicts cost it: the
// transactions bunqueue ran again after a deadlock or a lock wait timeout,
// the batches that failed, and the handler runs of items that had already
// run (a retried batch runs every handler in it again).

// retriesMetric is the engine's counter of transactions run again after a
// deadlock (1213) or a lock wait timeout (1205).
const retriesMetric = "bunqueue.transaction.retries"

// batchFailedMessage is what the engine logs, at error level, for a batch
// that failed (after its retries, if any).
const batchFailedMessage = "bunqueue: batch failed"

// conflicts is what one scenario's clients and handlers saw. Every client
// of the scenario reports to it through the Config that bench.config
// returns; its handlers, through the tallies of newTally.
type conflicts struct {
	seen    idSet        // the items whose handler ran
	handled atomic.Int64 // distinct items whose handler ran
	reruns  atomic.Int64 // runs of a handler for an item that had already run
	failed  atomic.Int64 // batches that failed
	retries atomic.Int64 // reported by child processes; the rest is in readers
	used    atomic.Bool  // handlers ran (the plain-SQL scenarios' clients only enqueue)

	mu        sync.Mutex
	readers   []*sdkmetric.ManualReader
	providers []*sdkmetric.MeterProvider
	mp        *sdkmetric.MeterProvider // the clients' own, made on first use
}

// ran records a run of the handler of the item id, and reports whether it
// was the item's first.
func (c *conflicts) ran(id int64) bool {
	if c.seen.add(id) {
		c.handled.Add(1)
		return true
	}
	c.reruns.Add(1)
	return false
}

// meterProvider returns the scenario's MeterProvider: an SDK one read by a
// manual reader, that keeps the retries counter and drops every other
// instrument, so that the scenarios cost what they did with the global
// no-op provider, give or take the counter.
func (c *conflicts) meterProvider() metric.MeterProvider {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mp == nil {
		r := sdkmetric.NewManualReader()
		c.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithView(onlyRetries))
		c.readers = append(c.readers, r)
		c.providers = append(c.providers, c.mp)
	}
	return c.mp
}

// onlyRetries is a view that drops every instrument but the retries
// counter, which keeps its default aggregation (a sum).
func onlyRetries(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if i.Name == retriesMetric {
		return sdkmetric.Stream{}, false
	}
	return sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}, true
}

// watch adds the retries that reader sees to the scenario's, for a
// scenario whose clients have a MeterProvider of their own (mp, shut down
// once read).
func (c *conflicts) watch(reader *sdkmetric.ManualReader, mp *sdkmetric.MeterProvider) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readers = append(c.readers, reader)
	c.providers = append(c.providers, mp)
}

// addChild adds what a child process counted.
func (c *conflicts) addChild(rep childReport) {
	c.used.Store(true)
	c.retries.Add(rep.TxRetries)
	c.failed.Add(rep.FailedBatches)
	c.handled.Add(rep.Handled)
	c.reruns.Add(rep.Reruns)
}

// report puts what a child process's clients counted in rep, for the
// parent's addChild.
func (c *conflicts) report(ctx context.Context, rep *childReport) error {
	retries, err := c.totalRetries(ctx)
	if err != nil {
		return err
	}
	rep.TxRetries, rep.FailedBatches, rep.Handled, rep.Reruns = retries, c.failed.Load(), c.handled.Load(), c.reruns.Load()
	return nil
}

// totalRetries reads the retries counter of every reader, adds the child
// processes' and shuts the providers down. Call it once the scenario's
// clients have stopped.
func (c *conflicts) totalRetries(ctx context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.retries.Load()
	var errs []error
	for _, r := range c.readers {
		var rm metricdata.ResourceMetrics
		errs = append(errs, r.Collect(ctx, &rm))
		n += sumCounter(rm, retriesMetric)
	}
	for _, mp := range c.providers {
		_ = mp.Shutdown(ctx)
	}
	c.readers, c.providers, c.mp = nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("read %s: %w", retriesMetric, err)
	}
	return n, nil
}

// sumCounter adds up the data points of the int64 counter named name.
func sumCounter(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// fill sets r's conflict columns, if the scenario ran handlers; the
// plain-SQL scenarios keep theirs empty (nothing retries there: a
// deadlock fails the scenario; a client that enqueued their backlog is
// set-up).
func (c *conflicts) fill(ctx context.Context, r *result) error {
	retries, err := c.totalRetries(ctx)
	if err != nil || !c.used.Load() {
		return err
	}
	failed, handled, reruns := c.failed.Load(), c.handled.Load(), c.reruns.Load()
	share := 0.0
	if handled > 0 {
		share = float64(reruns) / float64(handled)
	}
	r.TxRetries, r.FailedBatches, r.Handled, r.Reruns, r.RerunShare = &retries, &failed, &handled, &reruns, &share
	return nil
}

// logger returns next with the scenario's count of failed batches.
func (c *conflicts) logger(next *slog.Logger) *slog.Logger {
	return slog.New(countingHandler{next: next.Handler(), c: c})
}

// countingHandler counts the failed batches its records report, and
// hands every record on to next.
type countingHandler struct {
	next slog.Handler
	c    *conflicts
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.next.Enabled(ctx, l)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == batchFailedMessage {
		h.c.failed.Add(1)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return countingHandler{next: h.next.WithAttrs(attrs), c: h.c}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{next: h.next.WithGroup(name), c: h.c}
}

// tally counts the items of one part of a scenario (a burst, a window)
// whose handler ran, each once, and reports every run to the scenario's
// conflicts.
type tally struct {
	done atomic.Int64 // items whose handler ran for the first time here
	c    *conflicts
}

// newTally returns a tally of the scenario being run, which has handlers
// then: its row gets the conflict columns.
func (b *bench) newTally() *tally {
	b.scene.used.Store(true)
	return &tally{c: b.scene}
}

// ran records a run of the handler of the item id, and reports whether
// it was the item's first in the scenario.
func (t *tally) ran(id int64) bool {
	if !t.c.ran(id) {
		return false
	}
	t.done.Add(1)
	return true
}

// idPageBits is how many ids a page of an idSet holds.
const idPageBits = 1 << 16

// idPage is a bit per id of one page.
type idPage [idPageBits / 64]atomic.Uint64

// idSet is a set of ids safe for concurrent use: a bit per id, in pages
// made as needed, so that the dense ids of a backlog cost a bit each (the
// memory scenarios report the RSS).
type idSet struct {
	mu    sync.RWMutex
	pages map[uint64]*idPage
}

// add adds id to the set and reports whether it was not there yet.
func (s *idSet) add(id int64) bool {
	u := uint64(id) // a negative id is a large one: distinct all the same
	p := s.page(u / idPageBits)
	i := u % idPageBits
	bit := uint64(1) << (i % 64)
	return p[i/64].Or(bit)&bit == 0
}

// page returns the page of number n, made if missing.
func (s *idSet) page(n uint64) *idPage {
	s.mu.RLock()
	p := s.pages[n]
	s.mu.RUnlock()
	if p != nil {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pages == nil {
		s.pages = map[uint64]*idPage{}
	}
	if p = s.pages[n]; p == nil {
		p = new(idPage)
		s.pages[n] = p
	}
	return p
}
