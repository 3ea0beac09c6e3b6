package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// view is what the templates get.
type view struct {
	*Data
	Title     string
	RefreshMS int64
	CSRF      string
	Notice    string
	Query     string // the filter as a query string, for the refresh
	Charts    []queueCharts
	// JSON is the href of the page's data.json link, with the filter: a
	// template.URL, so that html/template does not escape the query
	// string, which url.Values.Encode has escaped already, a second time.
	JSON template.URL
}

var funcs = template.FuncMap{
	"depth":  depthLabel,
	"limits": limitsLabel,
	"half":   func(n int) int { return n / 2 },
	"ago": func(t, now time.Time) string {
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			d = 0
		}
		return d.String() + " ago"
	},
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	// page returns the query string of a page of failed jobs.
	"page": func(f Filter, before *int64) string {
		q := url.Values{}
		if f.Queue != "" {
			q.Set("queue", f.Queue)
		}
		if f.Kind != "" {
			q.Set("kind", f.Kind)
		}
		if before != nil {
			q.Set("before", strconv.FormatInt(*before, 10))
		}
		if len(q) == 0 {
			return "./"
		}
		return "./?" + q.Encode()
	},
	"when": when,
	"firstLine": func(s string) string {
		line, _, more := strings.Cut(s, "\n")
		if r := []rune(line); len(r) > 120 {
			line, more = string(r[:120]), true
		}
		if more {
			line += " …"
		}
		return line
	},
}

// view returns the template data of r.
func (h *handler) view(w http.ResponseWriter, r *http.Request) *view {
	d := h.data(r)
	v := &view{Data: d, Title: h.opts.Title, RefreshMS: h.opts.RefreshInterval.Milliseconds(), Notice: h.notice(r), Charts: namedCharts(chartsOf(d.History), d.QueueClients)}
	if h.opts.AllowActions {
		v.CSRF = h.csrfToken(w, r)
	}
	q := url.Values{}
	if d.Filter.Queue != "" {
		q.Set("queue", d.Filter.Queue)
	}
	if d.Filter.Kind != "" {
		q.Set("kind", d.Filter.Kind)
	}
	if d.Filter.BeforeID > 0 {
		q.Set("before", strconv.FormatInt(d.Filter.BeforeID, 10))
	}
	v.Query = q.Encode()
	v.JSON = "data.json"
	if v.Query != "" {
		v.JSON += template.URL("?" + v.Query)
	}
	return v
}

// notice is the message shown after an action that the browser posted
// without the page's script (and was redirected back): only numbers, and
// the names of a queue and a client that exist, come from the query; the
// words are the dashboard's.
func (h *handler) notice(r *http.Request) string {
	q := r.URL.Query()
	switch q.Get("done") {
	case "pause":
		return h.queueNamed(r) + " is paused, for every process: those that run it start no more of its rows within a poll interval."
	case "resume":
		return h.queueNamed(r) + " is resumed, for every process."
	}
	id, err := strconv.ParseInt(q.Get("id"), 10, 64)
	if err != nil {
		return ""
	}
	switch q.Get("done") {
	case "retry":
		job, _ := strconv.ParseInt(q.Get("job"), 10, 64)
		return fmt.Sprintf("Failed job %d is back in its queue as job %d.", id, job)
	case "delete":
		return fmt.Sprintf("Failed job %d was deleted.", id)
	}
	return ""
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	h.render(w, "page", h.view(w, r))
}

func (h *handler) fragment(w http.ResponseWriter, r *http.Request) {
	h.render(w, "live", h.view(w, r))
}

func (h *handler) render(w http.ResponseWriter, name string, v any) {
	h.renderStatus(w, http.StatusOK, name, v)
}

// renderStatus writes the template name, executed with v, with status.
func (h *handler) renderStatus(w http.ResponseWriter, status int, name string, v any) {
	var b bytes.Buffer
	if err := h.pages.ExecuteTemplate(&b, name, v); err != nil {
		http.Error(w, "dashboard: render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (h *handler) json(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.data(r))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ActionResult is the JSON answer to POST retry or delete, for a request
// that accepts application/json.
type ActionResult struct {
	OK bool  `json:"ok"`
	ID int64 `json:"id"`
	// NewJobID is the job's id in bunqueue_jobs after a retry.
	NewJobID int64  `json:"new_job_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// action runs POST retry or delete on the failed job of the form's id,
// or pause or resume on the queue of the form's name.
func (h *handler) action(w http.ResponseWriter, r *http.Request, what string) {
	wantsJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	refuse := func(status int, msg string) {
		if wantsJSON {
			writeJSON(w, status, ActionResult{Error: msg})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		fmt.Fprintf(w, "bunqueue dashboard: %s\n", msg)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		refuse(http.StatusMethodNotAllowed, "use POST")
		return
	}
	if !h.allowed(r, what) {
		refuse(http.StatusForbidden, h.refusal(what))
		return
	}
	if err := h.origins.Check(r); err != nil {
		refuse(http.StatusForbidden, "cross-origin request refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if !h.checkCSRF(r) {
		refuse(http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
		return
	}
	if what == "pause" || what == "resume" {
		h.queueAction(w, r, what, wantsJSON, refuse)
		return
	}
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil || id <= 0 {
		refuse(http.StatusBadRequest, "the form's id is not a failed job's id")
		return
	}
	res := ActionResult{ID: id}
	switch what {
	case "retry":
		res.NewJobID, err = h.client.RetryFailed(r.Context(), id)
	case "delete":
		err = h.client.DeleteFailed(r.Context(), id)
	}
	switch {
	case errors.Is(err, bunqueue.ErrFailedJobNotFound):
		refuse(http.StatusNotFound, fmt.Sprintf("no failed job with id %d (retried or deleted already?)", id))
		return
	case err != nil:
		refuse(http.StatusInternalServerError, err.Error())
		return
	}
	res.OK = true
	if wantsJSON {
		writeJSON(w, http.StatusOK, res)
		return
	}
	back := url.Values{"done": {what}, "id": {strconv.FormatInt(id, 10)}}
	if res.NewJobID > 0 {
		back.Set("job", strconv.FormatInt(res.NewJobID, 10))
	}
	for _, k := range []string{"queue", "kind", "before"} {
		if v := r.PostFormValue(k); v != "" {
			back.Set(k, v)
		}
	}
	// Relative to the request's URL, as the browser sees it: http.Redirect
	// would resolve it against the path left by http.StripPrefix.
	w.Header().Set("Location", "./?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// QueueResult is the JSON answer to POST pause or resume, for a request
// that accepts application/json.
type QueueResult struct {
	OK     bool   `json:"ok"`
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
	Error  string `json:"error,omitempty"`
}

// queueAction pauses or resumes the queue of the form's name, for every
// process, through the client of the form's client (New's if empty).
func (h *handler) queueAction(w http.ResponseWriter, r *http.Request, what string, wantsJSON bool, refuse func(int, string)) {
	name, owner := r.PostFormValue("name"), h.clientNamed(r.PostFormValue("client"))
	if owner < 0 || !h.hasQueue(r, owner, name) {
		refuse(http.StatusBadRequest, "the form's name is not one of this client's queues")
		return
	}
	client := h.clients[owner].Client
	var err error
	if what == "pause" {
		err = client.PauseQueue(r.Context(), name)
	} else {
		err = client.ResumeQueue(r.Context(), name)
	}
	if err != nil {
		refuse(http.StatusInternalServerError, err.Error())
		return
	}
	h.forget() // the next page shows the change
	if wantsJSON {
		writeJSON(w, http.StatusOK, QueueResult{OK: true, Queue: name, Paused: what == "pause"})
		return
	}
	back := url.Values{"done": {what}, "name": {name}}
	if len(h.clients) > 1 {
		back.Set(clientParam, h.clients[owner].Name)
	}
	w.Header().Set("Location", "./?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// queueNamed returns the words that name the queue of the query's name
// and client, "The queue", with its name if it is one of the client's
// queues, and the client's if the dashboard has several.
func (h *handler) queueNamed(r *http.Request) string {
	q := r.URL.Query()
	name, owner := q.Get("name"), h.clientNamed(q.Get(clientParam))
	if name == "" || owner < 0 || !h.hasQueue(r, owner, name) {
		return "The queue"
	}
	if len(h.clients) > 1 {
		return fmt.Sprintf("The queue %s of client %s", name, h.clients[owner].Name)
	}
	return "The queue " + name
}

// hasQueue reports whether name is one of the queues of client owner.
func (h *handler) hasQueue(r *http.Request, owner int, name string) bool {
	stats, owners, _ := h.stats(r) // names are there even when a depth failed
	for i, st := range stats {
		if st.Name == name && owners[i] == owner {
			return true
		}
	}
	return false
}
