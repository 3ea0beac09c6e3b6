package main

import (
	"context"
	"errors"
	"fmt"
)

// This file reads, at the two ends of a scenario's measured window, what
// the window cost per item: the CPU time of this process and of the local
// server, and the server's transactions.

// meterSample is what the bench read at one end of a window.
type meterSample struct {
	cpu cpuSample
	tx  *txMark // nil without a transaction counter
}

// costs is what a window cost per item; nil where it was not measured.
type costs struct {
	client, server *float64 // µs of CPU: this process, the local server's processes
	tx             *float64 // transactions the server ended
}

// fill sets r's per-item columns.
func (c costs) fill(r *result) {
	r.ClientCPU, r.ServerCPU, r.TxPerItem = c.client, c.server, c.tx
}

// sampleMeters reads the meters now. On PostgreSQL the transaction count
// goes on being read for a second after (see txCounter.spread): the
// window's work must go on until windowCosts returns.
func (b *bench) sampleMeters(ctx context.Context) meterSample {
	s := meterSample{cpu: readCPU()}
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
		tx := (n1 - n0) / float64(items)
		b.last.tx = &tx
	}
}

// warn prints a warning about the run on the progress output.
func (b *bench) warn(format string, args ...any) {
	fmt.Fprintf(b.progress, "bunqueue-bench: warning: "+format+"\n", args...)
}
