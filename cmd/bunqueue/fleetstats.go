package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/bunqueue/bunqueue/internal/histsql"
)

// fleetQueue is one queue's last hour in the fleet's history: what every
// process that runs it completed and failed (Client.FleetHistory).
type fleetQueue struct {
	Queue     string `json:"queue"`
	Processed int64  `json:"processed"`
	Failed    int64  `json:"failed"`
}

// fleetLastHour reads the fleet's history of the last hour, by queue
// (only the one named, if any), from the minute rows: every queue a
// started client ran, over its tables or the jobs table. It returns nil,
// and no error, where the history table is missing (a schema before
// version 12).
func fleetLastHour(ctx context.Context, d *database, only string) ([]fleetQueue, error) {
	h := histsql.New(d.dialect, d.names)
	now, err := h.Now(ctx, d.db)
	if err != nil {
		return nil, fmt.Errorf("read the database clock: %w", err)
	}
	rows, err := h.List(ctx, d.db, only, now-now%histsql.Minute-(histsql.KeepMinutes-histsql.Minute))
	if err != nil && d.dialect.MissingTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the fleet's history: %w", err)
	}
	byQueue := map[string]*fleetQueue{}
	for _, r := range rows {
		if r.Res != histsql.Minute {
			continue
		}
		q := byQueue[r.Queue]
		if q == nil {
			q = &fleetQueue{Queue: r.Queue}
			byQueue[r.Queue] = q
		}
		q.Processed += r.Processed
		q.Failed += r.Failed
	}
	out := []fleetQueue{}
	for _, name := range slices.Sorted(maps.Keys(byQueue)) {
		out = append(out, *byQueue[name])
	}
	return out, nil
}

// printFleet prints the fleet's last hour by queue, after the jobs'
// counts; nothing where the history table is missing.
func printFleet(w io.Writer, fleet []fleetQueue) {
	if fleet == nil {
		return
	}
	fmt.Fprintln(w)
	if len(fleet) == 0 {
		fmt.Fprintln(w, "last hour, whole fleet: nothing processed or failed")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPROCESSED (LAST HOUR, FLEET)\tFAILED (LAST HOUR, FLEET)")
	for _, q := range fleet {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", printable(q.Queue, false), q.Processed, q.Failed)
	}
	_ = tw.Flush()
}
