package dashboard

import (
	"fmt"
	"net/http"
)

// The actions that Options.Authorize is asked about.
const (
	// ActionView is reading: every page, fragment and data.json.
	ActionView = "view"
	// ActionRetry puts a failed job back in its queue (RetryFailed).
	ActionRetry = "retry"
	// ActionCancel cancels a waiting or running job (JobCancel).
	ActionCancel = "cancel"
	// ActionDelete deletes a job or a failed job for good (JobDelete,
	// DeleteFailed).
	ActionDelete = "delete"
	// ActionRunNow makes a scheduled or retrying job due now (JobRunNow).
	ActionRunNow = "run_now"
	// ActionPause and ActionResume pause and resume a queue for every
	// process (PauseQueue, ResumeQueue).
	ActionPause  = "pause"
	ActionResume = "resume"
	// ActionRetryRow retries rows of a table queue that failed for good,
	// with the app's Options.RetryRow function.
	ActionRetryRow = "retry_row"
)

// allowed reports whether r may do action: reading unless Authorize
// refuses it; an action only with AllowActions and unless Authorize
// refuses it.
func (h *handler) allowed(r *http.Request, action string) bool {
	if action != ActionView && !h.opts.AllowActions {
		return false
	}
	return h.opts.Authorize == nil || h.opts.Authorize(r, action)
}

// refusal is the message of a 403 for action, which allowed refused.
func (h *handler) refusal(action string) string {
	if action != ActionView && !h.opts.AllowActions {
		return "actions are off: the app turns them on with dashboard.Options.AllowActions"
	}
	return fmt.Sprintf("not authorized to %s: the app's dashboard.Options.Authorize refused it", action)
}

// permissions are what a page's buttons may do, for its template.
type permissions struct {
	r *http.Request
	h *handler
}

// Can reports whether the page's request may do action: the template
// shows the action's buttons only then.
func (p permissions) Can(action string) bool { return p.h.allowed(p.r, action) }
