package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/bunqueue/bunqueue"
)

// ActionResult is the answer to POST retry or POST delete, the overview's
// actions on one failed job, as JSON for a request that accepts
// application/json.
type ActionResult struct {
	// OK tells whether the failed job was retried or deleted.
	OK bool `json:"ok"`
	// Action is the action: retry or delete.
	Action string `json:"action"`
	// ID is the form's id, a failed job's FailedJob.ID (not its job id);
	// 0 when the form was not read or its id is not a number.
	ID int64 `json:"id"`
	// NewJobID is the id, in the jobs table, of the job a retry put back
	// in its queue; absent otherwise.
	NewJobID int64 `json:"new_job_id,omitempty"`
	// Error says why nothing was done; absent when OK.
	Error string `json:"error,omitempty"`
}

// failedAction serves POST retry or delete (what) on the failed job of
// the form's id.
func (h *handler) failedAction(w http.ResponseWriter, r *http.Request, what string) {
	res := ActionResult{Action: what}
	refuse := func(status int, msg string) {
		res.Error = msg
		refuseReply(w, r, status, msg, res)
	}
	if status, msg := readPost(w, r, formLimit); status != 0 {
		refuse(status, msg)
		return
	}
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err == nil && id > 0 {
		res.ID = id
	}
	if status, msg := h.check(r, what); status != 0 {
		refuse(status, msg)
		return
	}
	if res.ID == 0 {
		refuse(http.StatusBadRequest, "the form's id is not a failed job's id")
		return
	}
	switch what {
	case ActionRetry:
		res.NewJobID, err = h.client.RetryFailed(r.Context(), id)
	case ActionDelete:
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
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	back := url.Values{"done": {what}, "id": {strconv.FormatInt(id, 10)}}
	if res.NewJobID > 0 {
		back.Set("job", strconv.FormatInt(res.NewJobID, 10))
	}
	for _, k := range []string{"queue", "kind", "before", recentParam} {
		if v := r.PostFormValue(k); v != "" {
			back.Set(k, v)
		}
	}
	// Relative to the request's URL, as the browser sees it: http.Redirect
	// would resolve it against the path left by http.StripPrefix.
	w.Header().Set("Location", "./?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}
