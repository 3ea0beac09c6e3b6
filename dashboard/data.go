package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bunqueue/bunqueue"
)

// shownBytes is how much of a payload or an error the page and the JSON
// show; FailedJob.ArgsBytes and ErrorBytes tell the whole size.
const shownBytes = 16 << 10

// Data is what the page shows and data.json returns.
type Data struct {
	// GeneratedAt is when the data was read, in UTC.
	GeneratedAt time.Time `json:"generated_at"`
	// Queues are the client's queues (Client.Stats), then those of
	// Options.Clients.
	Queues []bunqueue.QueueStats `json:"queues"`
	// QueuesError is why some queue's depth could not be counted.
	QueuesError string `json:"queues_error,omitempty"`
	// QueueClients name the client of each of Queues, in their order,
	// when the dashboard shows several (Options.Clients); else absent.
	QueueClients []string `json:"queue_clients,omitempty"`
	// History is each queue's last hour, a minute a slot, in the order
	// of Queues: the whole fleet's (Client.FleetHistory), or this
	// process's with Filter.Scope "process" or where the fleet's history
	// cannot be read (a schema before version 12).
	History []QueueHistory `json:"history"`
	// HistoryScope says whose History is: "fleet" or "process".
	HistoryScope string `json:"history_scope"`
	// RecentFailures are the latest failures in this process, newest
	// first (Client.RecentFailures).
	RecentFailures []bunqueue.Failure `json:"recent_failures"`
	// Filter is the page of failed jobs shown.
	Filter Filter `json:"filter"`
	// FailedJobs are one page of failed jobs, newest first.
	FailedJobs []FailedJob `json:"failed_jobs"`
	// FailedJobsError is why the failed jobs could not be read.
	FailedJobsError string `json:"failed_jobs_error,omitempty"`
	// NextBeforeID is the before= of the next page, or null on the last.
	NextBeforeID *int64 `json:"next_before_id"`
	// ActionsEnabled tells whether POST retry and delete are accepted.
	ActionsEnabled bool `json:"actions_enabled"`

	// queueOwners and failureOwners are the index in the handler's
	// clients of the client of each of Queues and RecentFailures.
	queueOwners, failureOwners []int
}

// Filter selects a page of failed jobs: the query parameters queue, kind
// and before of the page, the fragment and data.json.
type Filter struct {
	Queue    string `json:"queue,omitempty"`
	Kind     string `json:"kind,omitempty"`
	BeforeID int64  `json:"before_id,omitempty"`
	// Scope is "process" for the charts of this process's last hour
	// instead of the whole fleet's (query parameter scope).
	Scope string `json:"scope,omitempty"`
}

// FailedJob is a failed job as the dashboard shows it. Args and Error
// are cut to 16 KiB (ArgsBytes and ErrorBytes are their whole sizes); Args
// is the payload as text, with bytes that are not UTF-8 replaced.
type FailedJob struct {
	ID          int64     `json:"id"`
	JobID       int64     `json:"job_id"`
	Queue       string    `json:"queue"`
	Kind        string    `json:"kind"`
	Args        string    `json:"args"`
	ArgsBytes   int       `json:"args_bytes"`
	Metadata    string    `json:"metadata,omitempty"`
	Priority    int       `json:"priority"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
	Error       string    `json:"error"`
	ErrorBytes  int       `json:"error_bytes"`
	CreatedAt   time.Time `json:"created_at"`
	FailedAt    time.Time `json:"failed_at"`
}

// cut returns at most shownBytes of s, as valid UTF-8.
func cut(s string) string {
	if len(s) > shownBytes {
		s = s[:shownBytes]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// filterOf reads the filter of r's query.
func filterOf(q url.Values) Filter {
	f := Filter{Queue: q.Get("queue"), Kind: q.Get("kind")}
	if q.Get("scope") == scopeProcess {
		f.Scope = scopeProcess
	}
	if b, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil && b > 0 {
		f.BeforeID = b
	}
	return f
}

// data reads what the page shows.
func (h *handler) data(r *http.Request) *Data {
	d := &Data{
		GeneratedAt:    time.Now().UTC(),
		Filter:         filterOf(r.URL.Query()),
		ActionsEnabled: h.opts.AllowActions,
		FailedJobs:     []FailedJob{},
	}
	d.RecentFailures, d.failureOwners = h.recentFailures()
	queues, owners, err := h.stats(r)
	d.Queues, d.QueueClients, d.queueOwners = queues, h.clientNames(owners), owners
	if d.Queues == nil {
		d.Queues = []bunqueue.QueueStats{}
	}
	if err != nil {
		d.QueuesError = err.Error()
	}
	d.History, d.HistoryScope = h.history(r.Context(), queues, owners, d.Filter.Scope != scopeProcess)
	jobs, err := h.client.FailedJobs(r.Context(), bunqueue.FailedJobsFilter{
		Queue: d.Filter.Queue, Kind: d.Filter.Kind, BeforeID: d.Filter.BeforeID, Limit: h.opts.PageSize,
	})
	switch {
	case errors.Is(err, bunqueue.ErrNotMigrated):
		d.FailedJobsError = "The jobs tables are not in this database; if the app uses jobs, migrate them: " + err.Error()
	case err != nil:
		d.FailedJobsError = err.Error()
	}
	for _, f := range jobs {
		d.FailedJobs = append(d.FailedJobs, FailedJob{
			ID: f.ID, JobID: f.JobID, Queue: f.Queue, Kind: f.Kind,
			Args: cut(string(f.Args)), ArgsBytes: len(f.Args), Metadata: cut(string(f.Metadata)),
			Priority: f.Priority, Attempts: f.Attempts, MaxAttempts: f.MaxAttempts,
			Error: cut(f.Error), ErrorBytes: len(f.Error), CreatedAt: f.CreatedAt.UTC(), FailedAt: f.FailedAt.UTC(),
		})
	}
	if len(jobs) == h.opts.PageSize {
		next := jobs[len(jobs)-1].ID
		d.NextBeforeID = &next
	}
	return d
}
