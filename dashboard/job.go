package dashboard

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// jobView is what the job page's template gets.
type jobView struct {
	frame
	ID  int64
	Job *bunqueue.JobRecord
	// Args, Metadata and Output are the job's, pretty-printed when they
	// are JSON, else as they are; cut to 16 KiB (ArgsCut, OutputCut).
	Args, Metadata, Output string
	ArgsCut, OutputCut     bool
	// Error is the job's last error, cut to 16 KiB (ErrorCut).
	Error    string
	ErrorCut bool
	// Attempts are the job's failed attempts, oldest first.
	Attempts []attemptView
	// AttemptsCapped is whether the job holds as many failed attempts as
	// are kept (bunqueue.AttemptErrorsKept): older ones were dropped.
	AttemptsCapped bool
	// TraceURL is the link to the job's trace, or "".
	TraceURL string
	// Problem is why the job could not be read.
	Problem string
}

// attemptView is one failed attempt on the job page: its number, when it
// failed (ISO for the time element, and to the millisecond, as retries
// can come within a second), and its error, cut as the last error is.
type attemptView struct {
	Attempt   int
	ISO, When string
	Error     string
	ErrorCut  bool
}

// attemptViews returns the rows of the job page's attempts table.
func attemptViews(errs bunqueue.AttemptErrors) []attemptView {
	out := make([]attemptView, len(errs))
	for i, e := range errs {
		out[i] = attemptView{Attempt: e.Attempt, ISO: e.At.UTC().Format(time.RFC3339Nano), When: e.At.UTC().Format("2006-01-02 15:04:05.000"),
			Error: cut(e.Error), ErrorCut: len(e.Error) > shownBytes}
	}
	return out
}

// job serves GET job?id=…: one job, as JobGet reads it.
func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	v := &jobView{frame: h.frame(w, r, "job")}
	id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
	if err != nil || id <= 0 {
		v.Problem = "The address's id is not a job's id."
		h.renderStatus(w, http.StatusBadRequest, "job", v)
		return
	}
	v.ID = id
	rec, err := h.clientOf(r).JobGet(r.Context(), id)
	status := http.StatusOK
	switch {
	case errors.Is(err, bunqueue.ErrJobNotFound):
		status = http.StatusNotFound
		v.Problem = "No job with this id: it never was, or it completed and was not kept (Config.Retention), or it was deleted."
	case err != nil:
		status = http.StatusInternalServerError
		v.Problem = jobsError(err)
	default:
		v.fill(rec, h.opts.TraceURL)
	}
	h.renderStatus(w, status, "job", v)
}

// fill sets what v shows of rec.
func (v *jobView) fill(rec *bunqueue.JobRecord, traceURL func(string) string) {
	v.Job = rec
	v.Args, v.ArgsCut = shown(rec.Args)
	v.Metadata = prettyMetadata(rec.Metadata)
	if rec.Output != nil {
		v.Output, v.OutputCut = shown(rec.Output)
	}
	v.Error, v.ErrorCut = cut(rec.LastError), len(rec.LastError) > shownBytes
	v.Attempts, v.AttemptsCapped = attemptViews(rec.Errors), len(rec.Errors) >= bunqueue.AttemptErrorsKept
	if traceURL != nil && rec.Failed != nil {
		if id := traceID(rec.Failed.TraceContext); id != "" {
			v.TraceURL = traceURL(id)
		}
	}
}

// shown returns raw pretty-printed if it is JSON, else as text, cut to
// shownBytes, and whether it was cut.
func shown(raw []byte) (string, bool) {
	s := string(raw)
	if p, err := prettyJSON(raw); err == nil {
		s = p
	}
	return cut(s), len(s) > shownBytes
}

// traceID returns the trace id of the traceparent in a job's trace
// context (lines of key=value, as bunqueue stores it), or "".
func traceID(carrier []byte) string {
	for line := range strings.Lines(string(carrier)) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "traceparent=")
		if !ok {
			continue
		}
		parts := strings.Split(v, "-")
		if len(parts) == 4 && len(parts[1]) == 32 && isHex(parts[1]) && strings.Trim(parts[1], "0") != "" {
			return parts[1]
		}
	}
	return ""
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// Actions returns the actions the job's state allows, in the order of
// the page's buttons.
func (v *jobView) Actions() []string {
	if v.Job == nil {
		return nil
	}
	return actionsFor(v.Job.State)
}

// actionsFor returns the actions a job in state can take.
func actionsFor(state bunqueue.JobState) []string {
	switch state {
	case bunqueue.JobStateFailed:
		return []string{ActionRetry, ActionDelete}
	case bunqueue.JobStateCompleted:
		return []string{ActionDelete}
	case bunqueue.JobStateRunning:
		return []string{ActionCancel}
	case bunqueue.JobStatePending:
		return []string{ActionCancel, ActionDelete}
	}
	return []string{ActionRunNow, ActionCancel, ActionDelete}
}
