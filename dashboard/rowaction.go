package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bunqueue/bunqueue"
)

// RowActionResult is the answer to POST retry-row, as JSON for a request
// that accepts application/json.
type RowActionResult struct {
	// OK tells whether every row of the form was retried.
	OK bool `json:"ok"`
	// Action is the action: retry_row.
	Action string `json:"action"`
	// Queue is the form's name, the table queue's; "" when the form was
	// not read.
	Queue string `json:"queue"`
	// Client is the form's client; absent when it names none (New's
	// client).
	Client string `json:"client,omitempty"`
	// Rows are the outcomes, one a row, in the form's order; empty when
	// the request was refused.
	Rows []RowOutcome `json:"rows"`
	// Error says why nothing was done, when the request was refused.
	Error string `json:"error,omitempty"`
}

// RowOutcome is what a retry-row did to one row.
type RowOutcome struct {
	// Key is the row's key, as the form gave it (FailedRow.Key).
	Key string `json:"key"`
	// OK tells whether the app's Options.RetryRow function retried it.
	OK bool `json:"ok"`
	// Error says why not: the row is not among those of the queue's
	// FailedRows function, or the app's function's error.
	Error string `json:"error,omitempty"`
}

// rowAction serves POST retry-row: the app's Options.RetryRow function of
// the form's queue (name) on each of the form's keys that the queue's
// FailedRows function lists. A browser's form comes back to the queue's
// page, saying how many rows were retried.
func (h *handler) rowAction(w http.ResponseWriter, r *http.Request) {
	res := RowActionResult{Action: ActionRetryRow, Rows: []RowOutcome{}}
	answer := func(status int, msg string) {
		res.Error = msg
		refuseReply(w, r, status, msg, res)
	}
	if status, msg := readPost(w, r, jobFormLimit); status != 0 {
		answer(status, msg)
		return
	}
	res.Queue, res.Client = r.PostFormValue("name"), r.PostFormValue(clientParam)
	if status, msg := h.check(r, ActionRetryRow); status != 0 {
		answer(status, msg)
		return
	}
	keys := r.PostForm["key"]
	switch owner := h.clientNamed(res.Client); {
	case owner < 0 || !h.hasTableQueue(r, owner, res.Queue):
		answer(http.StatusBadRequest, "the form's name is not one of this client's table queues")
		return
	case h.opts.RetryRow[res.Queue] == nil:
		answer(http.StatusBadRequest, fmt.Sprintf("the app gives no function to retry the rows of the queue %q (dashboard.Options.RetryRow)", res.Queue))
		return
	case len(keys) == 0:
		answer(http.StatusBadRequest, "no row selected: the form has no key")
		return
	case len(keys) > FailedRowsShown:
		answer(http.StatusBadRequest, fmt.Sprintf("%d rows selected, more than the %d one action takes", len(keys), FailedRowsShown))
		return
	}
	failed, err := callFailedRows(r.Context(), h.opts.FailedRows[res.Queue])
	if err != nil {
		answer(http.StatusInternalServerError, fmt.Sprintf("Options.FailedRows[%q]: %v", res.Queue, err))
		return
	}
	listed := map[string]bool{}
	for _, row := range failed {
		listed[row.Key] = true
	}
	status := h.retryRows(r.Context(), &res, keys, listed)
	if wantsJSON(r) {
		writeJSON(w, status, res)
		return
	}
	if !res.OK {
		var msgs []string
		for _, o := range res.Rows {
			if !o.OK {
				msgs = append(msgs, "row "+o.Key+": "+o.Error)
			}
		}
		refuseText(w, status, strings.Join(msgs, "; "))
		return
	}
	back := url.Values{"name": {res.Queue}, "done": {ActionRetryRow}, "rows": {strconv.Itoa(len(res.Rows))}}
	if res.Client != "" {
		back.Set(clientParam, res.Client)
	}
	w.Header().Set("Location", "queue?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// retryRows calls the app's Options.RetryRow function of res's queue on
// each of keys that listed holds, putting each one's outcome in res, and
// returns the status of the first row not retried (404: not listed; 500:
// the app's function failed), or 200.
func (h *handler) retryRows(ctx context.Context, res *RowActionResult, keys []string, listed map[string]bool) int {
	retry := h.opts.RetryRow[res.Queue]
	status := http.StatusOK
	res.OK = true
	for _, key := range keys {
		o, st := RowOutcome{Key: key, OK: true}, http.StatusOK
		switch {
		case !listed[key]:
			o.OK, o.Error, st = false, fmt.Sprintf("not among the rows Options.FailedRows[%q] returns (retried already?)", res.Queue), http.StatusNotFound
		default:
			if err := callRetryRow(ctx, retry, key); err != nil {
				o.OK, o.Error, st = false, fmt.Sprintf("Options.RetryRow[%q]: %v", res.Queue, err), http.StatusInternalServerError
			}
		}
		if !o.OK && res.OK {
			res.OK, status = false, st
		}
		res.Rows = append(res.Rows, o)
	}
	return status
}

// callRetryRow calls retry with key, turning its panic into an error.
func callRetryRow(ctx context.Context, retry func(context.Context, string) error, key string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return retry(ctx, key)
}

// hasTableQueue reports whether name is a table queue of client owner.
func (h *handler) hasTableQueue(r *http.Request, owner int, name string) bool {
	stats, owners, _ := h.stats(r)
	for i, st := range stats {
		if st.Name == name && owners[i] == owner {
			return st.Kind == bunqueue.QueueKindTable
		}
	}
	return false
}
