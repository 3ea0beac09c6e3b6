package dashboard

import "net/http"

// frame is what the job browser, the job page and an action's answer
// share: the title, the navigation, the CSRF token and the permissions.
type frame struct {
	permissions
	Title string
	// Nav names the page in the navigation: "jobs", "job" or "action".
	Nav string
	// CSRF is the token the page's forms carry, "" when no action is
	// allowed.
	CSRF string
}

// frame returns the frame of the page nav for r, setting the CSRF cookie
// when an action is allowed.
func (h *handler) frame(w http.ResponseWriter, r *http.Request, nav string) frame {
	f := frame{permissions: permissions{r: r, h: h}, Title: h.opts.Title, Nav: nav}
	if h.opts.AllowActions {
		f.CSRF = h.csrfToken(w, r)
	}
	return f
}
