package dashboard

import (
	"net/http"
	"strings"
)

// The most bytes the form of one POST may have: a retry, delete, pause
// or resume names one job or queue; a job-action up to maxSelected ids.
const (
	formLimit    = 4 << 10
	jobFormLimit = 64 << 10
)

// wantsJSON reports whether r accepts application/json: an action
// answers it with JSON, else with a page, a redirect or text.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// readPost reads the form of r, which must be a POST of at most limit
// bytes, and returns the status and message of its refusal, or 0.
func readPost(w http.ResponseWriter, r *http.Request, limit int64) (int, string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return http.StatusMethodNotAllowed, "use POST"
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		return http.StatusBadRequest, "the form could not be read: " + err.Error()
	}
	return 0, ""
}

// check returns the status and message of a refusal of action, asked by
// r, or 0: a Bearer token that is not Options.APIToken (401), an action
// that AllowActions or Authorize refuse, a request the browser marks as
// cross-origin, or, unless r carried Options.APIToken, one without the
// CSRF token of its cookie in its form (403).
func (h *handler) check(r *http.Request, action string) (int, string) {
	if tokenOf(r) == tokenRefused {
		return http.StatusUnauthorized, tokenRefusal
	}
	if !h.allowed(r, action) {
		return http.StatusForbidden, h.refusal(action)
	}
	if err := h.origins.Check(r); err != nil {
		return http.StatusForbidden, "cross-origin request refused"
	}
	if !ViaAPIToken(r) && !h.checkCSRF(r) {
		return http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again"
	}
	return 0, ""
}

// refuseReply answers a refused action: reply, whose Error the caller has
// set to msg, to a script that wants JSON, else msg as text.
func refuseReply(w http.ResponseWriter, r *http.Request, status int, msg string, reply any) {
	if wantsJSON(r) {
		writeJSON(w, status, reply)
		return
	}
	refuseText(w, status, msg)
}

// refuseText answers a refused action of a request that does not accept
// JSON with status and msg, as text.
func refuseText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte("bunqueue dashboard: " + msg + "\n"))
}
