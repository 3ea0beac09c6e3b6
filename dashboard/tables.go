package dashboard

import (
	"net/http"
	"net/url"
	"time"

	"github.com/bunqueue/bunqueue"
)

// queueView is what the page of a table queue gets.
type queueView struct {
	frame
	GeneratedAt time.Time
	Name        string
	Queue       *bunqueue.QueueStats
	// StatsError is why the queue's depth could not be counted.
	StatsError string
	Charts     []queueCharts
	// Failing are the queue's rows among Client.RecentFailures, by key,
	// the latest failure first.
	Failing []FailingRow
	// FailedRows are the first FailedRowsShown rows the app's
	// Options.FailedRows function returned, of FailedRowsTotal;
	// HasFailedRows tells whether the app declared one for the queue.
	HasFailedRows   bool
	FailedRows      []FailedRow
	FailedRowsTotal int
	FailedRowsError string
	// RetryRows tells whether the page's failed rows have a Retry button:
	// the app gave an Options.RetryRow function for the queue, and the
	// request may retry rows.
	RetryRows bool
	// RecentLimit is bunqueue.RecentFailuresLimit.
	RecentLimit int
	// Notice says what the action the page comes back from did (a pause
	// or a resume), or "".
	Notice string
	// Problem is why the page cannot show the queue; JobsQueue tells that
	// the name is a jobs queue's, whose jobs the job browser lists.
	Problem   string
	JobsQueue bool
}

// FailingRow is a row of a table queue whose latest failures this
// process saw (Client.RecentFailures): its key, its latest error and
// when, how many of the recent failures were its, and when this process
// completed it after its latest failure (zero: not since; see
// bunqueue.Failure.SucceededAt).
type FailingRow struct {
	Key         string
	Error       string
	At          time.Time
	Times       int
	SucceededAt time.Time
}

// failingRows groups the failures of queue among failures (newest
// first) by row, in the order of their latest failure.
func failingRows(queue string, failures []bunqueue.Failure) []FailingRow {
	var out []FailingRow
	at := map[string]int{}
	for _, f := range failures {
		if f.Queue != queue {
			continue
		}
		if i, ok := at[f.Key]; ok {
			out[i].Times++
			continue
		}
		at[f.Key] = len(out)
		row := FailingRow{Key: f.Key, Error: f.Error, At: f.At.UTC(), Times: 1}
		if !f.SucceededAt.IsZero() {
			row.SucceededAt = f.SucceededAt.UTC()
		}
		out = append(out, row)
	}
	return out
}

// queue serves GET queue?name=…: one table queue's figures, its last
// hour, the rows failing in this process and, when the app declared
// Options.FailedRows for it, the rows that failed for good; its live
// part refreshes itself from queue-live.
func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	v, status := h.queueView(w, r)
	if status == http.StatusOK {
		q := url.Values{"name": {v.Name}}
		if v.Client != "" {
			q.Set(clientParam, v.Client)
		}
		v.Live, v.RefreshMS = "queue-live?"+q.Encode(), h.opts.RefreshInterval.Milliseconds()
		v.Notice = h.notice(r)
	}
	h.renderStatus(w, status, "queue", v)
}

// queueLive serves GET queue-live?name=…: the part of the queue's page
// that refreshes itself.
func (h *handler) queueLive(w http.ResponseWriter, r *http.Request) {
	v, status := h.queueView(w, r)
	if status != http.StatusOK {
		http.Error(w, "bunqueue dashboard: "+v.Problem, status)
		return
	}
	h.render(w, "queuelive", v)
}

// queueView reads the page of the queue of r's name, of r's client, and
// its status: 404 when it is no table queue of the client.
func (h *handler) queueView(w http.ResponseWriter, r *http.Request) (*queueView, int) {
	v := &queueView{frame: h.frame(w, r, "queue"), GeneratedAt: time.Now().UTC(), Name: r.URL.Query().Get("name"),
		RecentLimit: bunqueue.RecentFailuresLimit}
	owner := h.chosen(r)
	stats, owners, err := h.stats(r)
	for i := range stats {
		if stats[i].Name == v.Name && owners[i] == owner {
			st := stats[i]
			v.Queue = &st
		}
	}
	switch {
	case v.Queue == nil:
		v.Problem = "No table queue of this client has this name."
		return v, http.StatusNotFound
	case v.Queue.Kind != bunqueue.QueueKindTable:
		v.Problem, v.JobsQueue, v.Queue = "This is a queue of the jobs table: the job browser lists its jobs.", true, nil
		return v, http.StatusNotFound
	}
	if err != nil && v.Queue.Depth < 0 {
		v.StatsError = err.Error()
	}
	hist, _ := h.history(r.Context(), []bunqueue.QueueStats{*v.Queue}, []int{owner}, false)
	v.Charts = chartsOf(hist, "")
	v.Failing = failingRows(v.Name, h.clients[owner].Client.RecentFailures())
	v.FailedRows, v.FailedRowsTotal, v.FailedRowsError, v.HasFailedRows = h.failedRows(r.Context(), v.Name)
	v.RetryRows = h.opts.RetryRow[v.Name] != nil && v.CSRF != "" && v.Can(ActionRetryRow)
	return v, http.StatusOK
}
