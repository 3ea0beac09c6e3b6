package main

import (
	"context"
	"errors"
	"fmt"
)

// This file reads, at the two ends of a scenario's measured window, what
// the window cost per item: the CPU time of this process, of the local
// server and of the forwarder, the round trips on the wire, and the
// server's transactions.

// meterSample is what the bench read at one end of a window.
type meterSample struct {
	cpu   cpuSample
	proxy *proxyStats // nil without a forwarder, or if it did not answer
	tx    *txMark     // nil without a transaction counter
}

// costs is what a window cost per item; nil where it was not measured.
type costs struct {
	client, server *float64 // µs of CPU: this process, the local server's processes
	proxy          *float64 // µs of CPU of the forwarder's process
	roundTrips     *float64 // on the wire, through the forwarder
	tx             *float64 // transactions the server ended
}

// fill sets r's per-item columns.
func (c costs) fill(r *result) {
	r.ClientCPU, r.ServerCPU, r.ProxyCPU = c.client, c.server, c.proxy
	r.RoundTrips, r.TxPerItem = c.roundTrips, c.tx
}

// sampleMeters reads the meters now. On PostgreSQL the transaction count
// goes on being read for a second after (see txCounter.spread): the
// window's work must go on until windowCosts returns.
func (b *bench) sampleMeters(ctx context.Context) meterSample {
	s := meterSample{cpu: readCPU()}
	if b.proxy != nil {
		ps, err := b.proxy.stats()
		if err != nil {
			b.warn("the forwarder's counts: %v", err)
		} else {
			s.proxy = &ps
		}
	}
	if b.tx != nil {
		s.tx = b.tx.mark(ctx)
	}
	return s
}

// windowCosts sets b.last to what the window from a to z cost per item,
// for the items handled in it. It waits until z's transaction count is
// read.
func (b *bench) windowCosts(a, z meterSample, items int64) {
	b.last = costs{}
	b.last.client, b.last.server = cpuPerItem(a.cpu, z.cpu, items)
	per := func(d float64) *float64 {
		v := d / float64(items)
		return &v
	}
	if a.proxy != nil && z.proxy != nil && items > 0 {
		b.last.roundTrips = per(float64(z.proxy.RoundTrips - a.proxy.RoundTrips))
		b.last.proxy = per(float64(z.proxy.CPUus - a.proxy.CPUus))
	}
	if a.tx == nil || z.tx == nil {
		return
	}
	n0, err0 := a.tx.value()
	n1, err1 := z.tx.value()
	if err := errors.Join(err0, err1); err != nil {
		b.warn("no tx/item: %v", err)
		return
	}
	if items > 0 {
		b.last.tx = per(n1 - n0)
	}
}

// warn prints a warning about the run on the progress output.
func (b *bench) warn(format string, args ...any) {
	fmt.Fprintf(b.progress, "bunqueue-bench: warning: "+format+"\n", args...)
}
