package dashboard

import (
	"net/http"
	"time"

	"github.com/bunqueue/bunqueue"
)

// processesView is the processes page: the process registry of the
// page's client, live processes first.
type processesView struct {
	frame
	Processes []bunqueue.Process
	// Alive and Stale count the live and the stale processes.
	Alive, Stale int
	// Now is when the page read the registry, for "ago".
	Now   time.Time
	Error string
	// StaleBeats is how many heartbeats a process misses to be stale.
	StaleBeats int
}

// processes serves the processes page (GET processes): every process
// that runs queues on the client's tables, with its queues, from
// Client.Processes.
func (h *handler) processes(w http.ResponseWriter, r *http.Request) {
	v := &processesView{frame: h.frame(w, r, "processes"), Now: time.Now(), StaleBeats: bunqueue.ProcessStaleBeats}
	ps, err := h.clientOf(r).Processes(r.Context())
	if err != nil {
		v.Error = jobsError(err)
		h.render(w, "processes", v)
		return
	}
	for _, p := range ps {
		if p.Stale {
			v.Stale++
			continue
		}
		v.Alive++
		v.Processes = append(v.Processes, p)
	}
	for _, p := range ps {
		if p.Stale {
			v.Processes = append(v.Processes, p)
		}
	}
	h.render(w, "processes", v)
}
