package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/bunqueue/bunqueue"
)

// maxSelected is the most jobs one POST job-action acts on.
const maxSelected = 1000

// maxSearched is the most jobs that a filter-wide action with a search
// looks through (JobListPage.Searched, over its pages), newest first:
// a search is served by no index, so the selection of one action is
// bounded as a page is.
const maxSearched = 10 * bunqueue.JobListSearchRows

// JobActionResult is the answer to POST job-action, as JSON for a request
// that accepts application/json.
type JobActionResult struct {
	// OK tells whether the action succeeded on every job.
	OK bool `json:"ok"`
	// Action is the action's name: retry, cancel, delete or run_now.
	Action string `json:"action"`
	// Jobs are the outcomes, one a job, in the form's order.
	Jobs []JobOutcome `json:"jobs"`
	// Error is why nothing was done, when the request was refused.
	Error string `json:"error,omitempty"`
}

// JobOutcome is what an action did to one job.
type JobOutcome struct {
	ID int64 `json:"id"`
	OK bool  `json:"ok"`
	// Was is the state JobCancel found the job in.
	Was bunqueue.JobState `json:"was,omitempty"`
	// NewJobID is the job's new id after a retry.
	NewJobID int64  `json:"new_job_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// actionView is what the template of an action's answer gets.
type actionView struct {
	frame
	*JobActionResult
	Back string
}

// jobAction serves POST job-action: the form's action (retry, cancel,
// delete or run_now) on each of the form's ids, job ids as JobGet takes
// them. The answer lists what happened to each.
func (h *handler) jobAction(w http.ResponseWriter, r *http.Request) {
	res := &JobActionResult{Action: r.URL.Query().Get("action"), Jobs: []JobOutcome{}}
	if status, msg := readPost(w, r, jobFormLimit); status != 0 {
		h.actionAnswer(w, r, status, res, msg)
		return
	}
	res.Action = r.PostFormValue("action")
	act := h.jobActions(h.clientOf(r))[res.Action]
	if act == nil {
		h.actionAnswer(w, r, http.StatusBadRequest, res, "the form's action is not one of retry, cancel, delete, run_now")
		return
	}
	if status, msg := h.check(r, res.Action); status != 0 {
		h.actionAnswer(w, r, status, res, msg)
		return
	}
	if _, err := h.clientIndex(r.Form.Get(clientParam)); err != nil {
		h.actionAnswer(w, r, http.StatusBadRequest, res, "the form's "+err.Error())
		return
	}
	ids, err := h.selection(r)
	if err != nil {
		h.actionAnswer(w, r, http.StatusBadRequest, res, err.Error())
		return
	}
	status := http.StatusOK
	res.OK = true
	for _, id := range ids {
		out := act(r.Context(), id)
		if !out.OK && res.OK {
			res.OK, status = false, outcomeStatus(out)
		}
		res.Jobs = append(res.Jobs, out.JobOutcome)
	}
	h.actionAnswer(w, r, status, res, "")
}

// selection returns the ids the form selects: its ids, or, when its
// field matching is set, those of the first maxSelected jobs that its
// filter (state, queue, kind, search) matches, newest first, read with
// JobList of the form's client before any is acted on; with a search,
// among the newest maxSearched jobs.
func (h *handler) selection(r *http.Request) ([]int64, error) {
	if r.PostFormValue("matching") == "" {
		return formIDs(r.PostForm["id"])
	}
	f := jobsFilterOf(r.PostForm)
	if f.Invalid != "" {
		return nil, errors.New(f.Invalid)
	}
	filter := f.list(maxSelected)
	filter.Cursor = ""
	var ids []int64
	for searched := 0; len(ids) < maxSelected && searched < maxSearched; {
		filter.Limit = maxSelected - len(ids)
		page, err := h.clientOf(r).JobList(r.Context(), filter)
		if err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		searched += page.Searched
		if page.Cursor == "" {
			break
		}
		filter.Cursor = page.Cursor
	}
	if len(ids) == 0 {
		return nil, errors.New("the filter matches no job")
	}
	return ids, nil
}

// formIDs parses the form's ids: 1 to maxSelected of them.
func formIDs(values []string) ([]int64, error) {
	if len(values) == 0 {
		return nil, errors.New("no job selected: tick the jobs to act on")
	}
	if len(values) > maxSelected {
		return nil, fmt.Errorf("%d jobs selected, more than the %d one action takes", len(values), maxSelected)
	}
	ids := make([]int64, 0, len(values))
	for _, v := range values {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("the form's id %q is not a job's id", v)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// outcome is a JobOutcome with the error it came from.
type outcome struct {
	JobOutcome
	err error
}

// outcomeStatus is the HTTP status of a failed outcome.
func outcomeStatus(o outcome) int {
	switch {
	case errors.Is(o.err, bunqueue.ErrJobNotFound), errors.Is(o.err, bunqueue.ErrFailedJobNotFound):
		return http.StatusNotFound
	case errors.Is(o.err, bunqueue.ErrJobRunning), errors.Is(o.err, bunqueue.ErrJobFinished), errors.Is(o.err, errNotFailed):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// errNotFailed is the error of a retry of a job that has not failed.
var errNotFailed = errors.New("it has not failed: only a failed or cancelled job can be retried")

// jobActions are the actions of POST job-action on c's jobs, by name.
func (h *handler) jobActions(c *bunqueue.Client) map[string]func(ctx context.Context, id int64) outcome {
	done := func(id int64, err error) outcome {
		o := outcome{JobOutcome: JobOutcome{ID: id, OK: err == nil}, err: err}
		if err != nil {
			o.Error = err.Error()
		}
		return o
	}
	return map[string]func(ctx context.Context, id int64) outcome{
		ActionRetry: func(ctx context.Context, id int64) outcome { return retryJob(ctx, c, id) },
		ActionCancel: func(ctx context.Context, id int64) outcome {
			was, err := c.JobCancel(ctx, id)
			o := done(id, err)
			o.Was = was
			return o
		},
		ActionDelete: func(ctx context.Context, id int64) outcome { return done(id, c.JobDelete(ctx, id)) },
		ActionRunNow: func(ctx context.Context, id int64) outcome { return done(id, c.JobRunNow(ctx, id)) },
	}
}

// retryJob puts c's failed job whose job id is id back in its queue.
func retryJob(ctx context.Context, c *bunqueue.Client, id int64) outcome {
	o := outcome{JobOutcome: JobOutcome{ID: id}}
	rec, err := c.JobGet(ctx, id)
	if err == nil && rec.Failed == nil {
		err = fmt.Errorf("bunqueue dashboard: retry job %d: %w", id, errNotFailed)
	}
	if err == nil {
		o.NewJobID, err = c.RetryFailed(ctx, rec.Failed.ID)
	}
	if err != nil {
		o.err, o.Error = err, err.Error()
		return o
	}
	o.OK = true
	return o
}

// actionAnswer writes res with status: JSON for a request that accepts
// it, else a page listing each job's outcome, with a link back.
func (h *handler) actionAnswer(w http.ResponseWriter, r *http.Request, status int, res *JobActionResult, refused string) {
	res.Error = refused
	if wantsJSON(r) {
		writeJSON(w, status, res)
		return
	}
	h.renderStatus(w, status, "action", &actionView{frame: h.frame(w, r, "action"), JobActionResult: res, Back: backOf(r)})
}

// backOf returns the form's back, the relative address of the page the
// form was on, if it is one of the dashboard's job pages; else "jobs".
func backOf(r *http.Request) string {
	back := r.PostFormValue("back")
	u, err := url.Parse(back)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || (u.Path != "jobs" && u.Path != "job") {
		return "jobs"
	}
	return u.String()
}
