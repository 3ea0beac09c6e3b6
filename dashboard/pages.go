package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	// Failures are the page of recent failures' groups shown, of the
	// query's recent.
	Failures failurePage
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
	"when":  whenOf,
	"inc":   func(n int) int { return n + 1 },
	"dec":   func(n int) int { return n - 1 },
	"href":  href,
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
	v := &view{Data: d, Title: h.opts.Title, RefreshMS: h.opts.RefreshInterval.Milliseconds(), Notice: h.notice(r), Charts: namedCharts(chartsOf(d.History, d.scopeToggle()), d.QueueClients),
		Failures: h.groupFailures(d, recentPageOf(r.URL.Query()))}
	if h.opts.AllowActions {
		v.CSRF = h.csrfToken(w, r)
	}
	v.Query = v.query(d.Filter.BeforeID, v.Failures.Page)
	v.JSON = "data.json"
	if v.Query != "" {
		v.JSON += template.URL("?" + v.Query)
	}
	return v
}

// query returns the overview's query string: its filter of failed jobs,
// their page before, and the page recent of the recent failures.
func (v *view) query(before int64, recent int) string {
	q := url.Values{}
	if v.Filter.Queue != "" {
		q.Set("queue", v.Filter.Queue)
	}
	if v.Filter.Kind != "" {
		q.Set("kind", v.Filter.Kind)
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if recent > 1 {
		q.Set(recentParam, strconv.Itoa(recent))
	}
	if v.Filter.Scope != "" {
		q.Set("scope", v.Filter.Scope)
	}
	return q.Encode()
}

// href returns the relative address of the overview of query q.
func href(q string) string {
	if q == "" {
		return "./"
	}
	return "./?" + q
}

// FailedPage returns the address of the overview's page of failed jobs
// below before (nil: the newest), keeping the page of recent failures.
func (v *view) FailedPage(before *int64) string {
	b := int64(0)
	if before != nil {
		b = *before
	}
	return href(v.query(b, v.Failures.Page))
}

// Cleared returns the address of the overview without the filter of
// failed jobs, keeping the page of recent failures.
func (v *view) Cleared() string {
	q := url.Values{}
	if v.Failures.Page > 1 {
		q.Set(recentParam, strconv.Itoa(v.Failures.Page))
	}
	return href(q.Encode())
}

// RecentPage returns the address of the overview's page n of recent
// failures, keeping the page of failed jobs.
func (v *view) RecentPage(n int) string {
	return href(v.query(v.Filter.BeforeID, n))
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
	case ActionRetryRow:
		n, err := strconv.Atoi(q.Get("rows"))
		if err != nil || n < 1 {
			return ""
		}
		rows := "rows"
		if n == 1 {
			rows = "row"
		}
		return fmt.Sprintf("%s: %d %s retried (Options.RetryRow).", h.queueNamed(r), n, rows)
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
