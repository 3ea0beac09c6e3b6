package dashboard

import (
	"context"
	"html/template"
	"time"

	"github.com/bunqueue/bunqueue"
)

// The scopes of the overview's charts: the whole fleet's history, or
// this process's.
const (
	scopeFleet   = "fleet"
	scopeProcess = "process"
)

// fleetHistory returns the whole fleet's last hour of each of queues,
// whose clients are owners (Client.FleetHistory), or the first error. A
// minute without a depth sampled by the upkeep's lease holder (which
// samples only the queues it runs) takes the depth this dashboard read
// in it, if any: the depth is the database's, the same from any process.
func (h *handler) fleetHistory(ctx context.Context, queues []bunqueue.QueueStats, owners []int) ([]QueueHistory, error) {
	out := make([]QueueHistory, 0, len(queues))
	for i, st := range queues {
		fh, err := h.clients[owners[i]].Client.FleetHistory(ctx, st.Name)
		if err != nil {
			return nil, err
		}
		qh := fleetQueueHistory(fh, st.Kind)
		h.mu.Lock()
		read := h.depths.series(depthKey(owners[i], st.Name), qh.From)
		h.mu.Unlock()
		for j, d := range read { // depth is the database's, whoever counts it
			if qh.Depth[j] < 0 {
				qh.Depth[j] = d
			}
		}
		out = append(out, qh)
	}
	return out, nil
}

// fleetQueueHistory returns the minutes of fh as the charts draw a
// queue's history.
func fleetQueueHistory(fh bunqueue.FleetHistory, kind bunqueue.QueueKind) QueueHistory {
	n := len(fh.Minutes)
	qh := bunqueue.QueueHistory{Queue: fh.Queue, From: fh.Minutes[0].At,
		Processed: make([]int64, n), Failed: make([]int64, n), Started: make([]int64, n),
		WaitP50: make([]time.Duration, n), WaitP95: make([]time.Duration, n), WaitMax: make([]time.Duration, n)}
	depth := make([]int, n)
	for i, p := range fh.Minutes {
		qh.Processed[i], qh.Failed[i], qh.Started[i] = p.Processed, p.Failed, p.Started
		qh.WaitP50[i], qh.WaitP95[i], qh.WaitMax[i] = p.WaitP50, p.WaitP95, p.WaitMax
		depth[i] = int(p.Depth)
	}
	return QueueHistory{QueueHistory: qh, Kind: kind, Depth: depth, Fleet: true}
}

// scopeToggle is the overview's link to its charts of the other scope,
// with the rest of its query kept.
func (d *Data) scopeToggle() template.URL {
	other := *d
	other.Filter.Scope = scopeProcess
	if d.HistoryScope != scopeFleet {
		other.Filter.Scope = ""
	}
	v := view{Data: &other}
	return template.URL(href(v.query(d.Filter.BeforeID, 0)))
}
