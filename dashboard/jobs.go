package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/bunqueue/bunqueue"
)

// browserStates are the job browser's tabs, in the order of a job's life.
var browserStates = []bunqueue.JobState{
	bunqueue.JobStateBlocked, bunqueue.JobStatePending, bunqueue.JobStateScheduled, bunqueue.JobStateRunning,
	bunqueue.JobStateRetrying, bunqueue.JobStateFailed, bunqueue.JobStateCompleted,
}

// prevKept is how many pages back the job browser's Previous goes; past
// them, Newest goes back to the first page.
const prevKept = 50

// JobsFilter selects a page of the job browser: the query parameters
// state, queue, kind, search, client, id, cursor and prev of GET jobs.
type JobsFilter struct {
	// State is one of the JobStates, or "" for all.
	State bunqueue.JobState
	Queue string
	Kind  string
	// Search is JobListFilter.Search: a text of the jobs' args or errors.
	Search string
	// Client names the client whose jobs the page lists, "" for New's.
	Client string
	// ID, when set, shows that job alone (JobGet).
	ID int64
	// Cursor is the page's JobListFilter.Cursor; "" for the first page.
	Cursor string
	// Prev are the cursors of the pages before this one, oldest first
	// (the first page's is ""), for Previous.
	Prev []string
	// Invalid says what is wrong with the query's state or id, or "".
	Invalid string
}

// jobsFilterOf reads the job browser's filter of q.
func jobsFilterOf(q url.Values) JobsFilter {
	f := JobsFilter{Queue: q.Get("queue"), Kind: q.Get("kind"), Search: q.Get("search"), Client: q.Get(clientParam),
		Cursor: q.Get("cursor"), Prev: q["prev"]}
	if s := bunqueue.JobState(q.Get("state")); slices.Contains(browserStates, s) {
		f.State = s
	} else if s != "" {
		f.Invalid = fmt.Sprintf("The state %q is not one of pending, scheduled, running, retrying, failed, completed.", s)
	}
	if s := q.Get("id"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			f.Invalid = fmt.Sprintf("The id %q is not a job's id (a positive whole number).", s)
		}
		f.ID = max(id, 0)
	}
	if len(f.Prev) > prevKept {
		f.Prev = f.Prev[len(f.Prev)-prevKept:]
	}
	return f
}

// href returns the relative address of the job browser with f's filter,
// on the page of cursor, with prev before it.
func (f JobsFilter) href(cursor string, prev []string) string {
	q := url.Values{}
	for k, v := range map[string]string{"state": string(f.State), "queue": f.Queue, "kind": f.Kind, "search": f.Search,
		clientParam: f.Client, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.ID > 0 {
		q.Set("id", strconv.FormatInt(f.ID, 10))
	}
	if cursor != "" {
		q["prev"] = prev
	}
	if len(q) == 0 {
		return "jobs"
	}
	return "jobs?" + q.Encode()
}

// Tab returns the address of the tab of state ("" for all), with the
// filter's queue, kind and search, on its first page.
func (f JobsFilter) Tab(state bunqueue.JobState) string {
	return JobsFilter{State: state, Queue: f.Queue, Kind: f.Kind, Search: f.Search, Client: f.Client}.href("", nil)
}

// Cleared returns the address of the filter's tab without its queue,
// kind, search and id.
func (f JobsFilter) Cleared() string {
	return JobsFilter{State: f.State, Client: f.Client}.href("", nil)
}

// OfClient returns the address of the filter's tab of the client name.
func (f JobsFilter) OfClient(name string) string {
	return JobsFilter{State: f.State, Client: name}.href("", nil)
}

// Self returns the address of the page f shows.
func (f JobsFilter) Self() string { return f.href(f.Cursor, f.Prev) }

// list returns the JobListFilter of f's tab and filter, on the page of
// its Cursor, of limit jobs.
func (f JobsFilter) list(limit int) bunqueue.JobListFilter {
	filter := bunqueue.JobListFilter{Queue: f.Queue, Kind: f.Kind, Search: f.Search, Cursor: f.Cursor, Limit: limit}
	if f.State != "" {
		filter.States = []bunqueue.JobState{f.State}
	}
	return filter
}

// jobsView is what the job browser's template gets.
type jobsView struct {
	frame
	Filter JobsFilter
	States []bunqueue.JobState
	Jobs   []bunqueue.JobRecord
	Error  string
	// Next, Previous and Newest are the addresses of those pages, or "".
	Next, Previous, Newest string
	// Searched, for a page of a search that its range ended short of
	// the page size, is how many jobs it looked through, as text; or "".
	Searched string
	// MatchingSearched is maxSearched, as text, for the filter-wide
	// action's words.
	MatchingSearched string
}

// jobs serves GET jobs: a page of jobs, newest first, by JobList (or
// JobGet, for an id).
func (h *handler) jobs(w http.ResponseWriter, r *http.Request) {
	f := jobsFilterOf(r.URL.Query())
	v := &jobsView{frame: h.frame(w, r, "jobs"), Filter: f, States: browserStates, MatchingSearched: thousands(maxSearched)}
	if f.Invalid != "" {
		v.Error = f.Invalid
		h.renderStatus(w, http.StatusBadRequest, "jobs", v)
		return
	}
	if f.ID > 0 {
		v.Jobs, v.Error = h.oneJob(r, f.ID)
		h.render(w, "jobs", v)
		return
	}
	page, err := h.clientOf(r).JobList(r.Context(), f.list(h.opts.PageSize))
	if errors.Is(err, bunqueue.ErrInvalidFilter) {
		v.Error = err.Error()
		h.renderStatus(w, http.StatusBadRequest, "jobs", v)
		return
	}
	if err != nil {
		v.Error = jobsError(err)
		h.render(w, "jobs", v)
		return
	}
	v.Jobs = page.Jobs
	if f.Search != "" && page.Cursor != "" && len(page.Jobs) < h.opts.PageSize {
		v.Searched = thousands(page.Searched)
	}
	if page.Cursor != "" {
		v.Next = f.href(page.Cursor, append(f.Prev[:len(f.Prev):len(f.Prev)], f.Cursor))
	}
	if f.Cursor != "" {
		v.Newest = f.href("", nil)
		if n := len(f.Prev); n > 0 {
			v.Previous = f.href(f.Prev[n-1], f.Prev[:n-1])
		}
	}
	h.render(w, "jobs", v)
}

// oneJob reads the job id for the job browser: the job, or why not.
func (h *handler) oneJob(r *http.Request, id int64) ([]bunqueue.JobRecord, string) {
	rec, err := h.clientOf(r).JobGet(r.Context(), id)
	if errors.Is(err, bunqueue.ErrJobNotFound) {
		return nil, ""
	}
	if err != nil {
		return nil, jobsError(err)
	}
	return []bunqueue.JobRecord{*rec}, ""
}

// jobsError is the message shown for an error of the job control API.
func jobsError(err error) string {
	if errors.Is(err, bunqueue.ErrNotMigrated) {
		return "The jobs tables are not in this database, or of an older schema version than this bunqueue's: " + err.Error()
	}
	return err.Error()
}

// thousands returns n with a comma between each group of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// whenShown is what the job browser's When column says of a job: the
// time its state makes the one to know, and the word that names it.
type whenShown struct {
	// Word names the time: "due" for a pending, scheduled or retrying
	// job (its run_at: when it was enqueued, scheduled for, or its
	// backoff ends), "lease ends" for a running lease-mode job,
	// "completed" or "failed".
	Word string
	// At is the time, or the zero time when the job has none.
	At time.Time
}

// whenOf returns what the When column says of j.
func whenOf(j bunqueue.JobRecord) whenShown {
	switch {
	case j.CompletedAt != nil:
		return whenShown{Word: "completed", At: *j.CompletedAt}
	case j.Failed != nil:
		return whenShown{Word: "failed", At: j.Failed.FailedAt}
	case j.State == bunqueue.JobStateRunning:
		return whenShown{Word: "lease ends", At: j.RunAt}
	}
	return whenShown{Word: "due", At: j.RunAt}
}
