package dashboard

import (
	"net/http"
	"net/url"
	"strconv"
)

// frame is what the job browser, the job page, the queue page and an
// action's answer share: the title, the navigation, the CSRF token, the
// permissions and the client the page is about.
type frame struct {
	permissions
	Title string
	// Nav names the page in the navigation: "jobs", "job", "queue",
	// "action" or "problem".
	Nav string
	// CSRF is the token the page's forms carry, "" when no action is
	// allowed.
	CSRF string
	// Client names the client whose jobs or queue the page shows, when
	// the dashboard has several (Clients lists them all, for the job
	// browser's selector); "" when it has one.
	Client  string
	Clients []string
	// Live, when set, is the address of the part of the page that
	// refreshes itself every RefreshMS milliseconds (assets/dashboard.js).
	Live      string
	RefreshMS int64
}

// frame returns the frame of the page nav for r, setting the CSRF cookie
// when an action is allowed.
func (h *handler) frame(w http.ResponseWriter, r *http.Request, nav string) frame {
	f := frame{permissions: permissions{r: r, h: h}, Title: h.opts.Title, Nav: nav}
	if h.opts.AllowActions {
		f.CSRF = h.csrfToken(w, r)
	}
	if len(h.clients) > 1 {
		f.Client = h.clients[h.chosen(r)].Name
		for _, c := range h.clients {
			f.Clients = append(f.Clients, c.Name)
		}
	}
	return f
}

// with returns q with the page's client, when it names one, encoded.
func (f frame) with(q url.Values) string {
	if f.Client != "" {
		q.Set(clientParam, f.Client)
	}
	return q.Encode()
}

// JobLink returns the relative address of the page of job id, of the
// page's client.
func (f frame) JobLink(id int64) string {
	return "job?" + f.with(url.Values{"id": {strconv.FormatInt(id, 10)}})
}

// JobsLink returns the relative address of the job browser, of the
// page's client, on the tab of state ("" for all) and, if set, queue.
func (f frame) JobsLink(state, queue string) string {
	q := url.Values{}
	for k, v := range map[string]string{"state": state, "queue": queue} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if s := f.with(q); s != "" {
		return "jobs?" + s
	}
	return "jobs"
}

// problemView is what the page of a refused address gets.
type problemView struct {
	frame
	Status  string
	Problem string
}

// problem answers r with status and a page that says problem.
func (h *handler) problem(w http.ResponseWriter, r *http.Request, status int, problem string) {
	h.renderStatus(w, status, "problem", &problemView{frame: h.frame(w, r, "problem"), Status: http.StatusText(status), Problem: problem})
}
