package dashboard

import (
	"context"
	"time"

	"github.com/bunqueue/bunqueue"
)

// QueueHistory is one queue's last hour, a minute a slot, oldest first:
// the processed and failed counts of Client.History, and a jobs queue's
// starts and waits before start; and the depths this dashboard saw.
type QueueHistory struct {
	bunqueue.QueueHistory
	// Kind is the queue's kind, as Client.Stats says: only a jobs queue
	// has waits before start.
	Kind bunqueue.QueueKind `json:"kind"`
	// Depth is, for each minute, in the fleet's history the largest depth
	// the holder of the upkeep's lease sampled in it (FleetPoint.Depth),
	// and in this process's the last depth this dashboard read in it
	// (Client.Stats, read when a page or its refresh asks, at most once a
	// second); -1 where there is none.
	Depth []int `json:"depth"`
	// Fleet says that the history is the whole fleet's.
	Fleet bool `json:"fleet"`
}

// depths are the depths a dashboard read, by queue, one a minute.
type depths map[string]*depthRing

// depthRing keeps the last depth read in each of 60 minutes.
type depthRing struct {
	at    [bunqueue.HistoryMinutes]int64 // the unix minute each slot holds
	depth [bunqueue.HistoryMinutes]int
}

// record keeps the depths of stats, read at now; owners are the index of
// each queue's client.
func (d depths) record(stats []bunqueue.QueueStats, owners []int, now time.Time) {
	minute := now.Unix() / 60
	for i, st := range stats {
		if st.Depth < 0 {
			continue
		}
		key := depthKey(owners[i], st.Name)
		r := d[key]
		if r == nil {
			r = &depthRing{}
			d[key] = r
		}
		i := minute % bunqueue.HistoryMinutes
		r.at[i], r.depth[i] = minute, st.Depth
	}
}

// series returns queue's depths of the minutes from from on, -1 where
// there is none.
func (d depths) series(queue string, from time.Time) []int {
	out := make([]int, bunqueue.HistoryMinutes)
	first := from.Unix() / 60
	r := d[queue]
	for i := range out {
		out[i] = -1
		if r != nil {
			m := first + int64(i)
			if j := m % bunqueue.HistoryMinutes; r.at[j] == m {
				out[i] = r.depth[j]
			}
		}
	}
	return out
}

// history returns the last hour of each of queues, whose clients are
// owners, and whose it is: the whole fleet's if fleet is set and every
// queue's fleet history could be read, else this process's.
func (h *handler) history(ctx context.Context, queues []bunqueue.QueueStats, owners []int, fleet bool) ([]QueueHistory, string) {
	if fleet {
		if out, err := h.fleetHistory(ctx, queues, owners); err == nil {
			return out, scopeFleet
		}
	}
	out := make([]QueueHistory, 0, len(queues))
	for i, st := range queues {
		qh := h.clients[owners[i]].Client.History(st.Name)
		h.mu.Lock()
		d := h.depths.series(depthKey(owners[i], st.Name), qh.From)
		h.mu.Unlock()
		out = append(out, QueueHistory{QueueHistory: qh, Kind: st.Kind, Depth: d})
	}
	return out, scopeProcess
}
