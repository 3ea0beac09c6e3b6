package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
)

// QueueResult is the answer to POST pause or POST resume, as JSON for a
// request that accepts application/json.
type QueueResult struct {
	// OK tells whether the queue was paused or resumed.
	OK bool `json:"ok"`
	// Action is the action: pause or resume.
	Action string `json:"action"`
	// Queue is the form's name, the queue's; "" when the form was not
	// read.
	Queue string `json:"queue"`
	// Client is the form's client, the name of the dashboard's client
	// whose queue it is; absent when the form names none (New's client).
	Client string `json:"client,omitempty"`
	// Paused tells whether the queue is paused now, for every process:
	// true after a pause, false after a resume; absent when nothing was
	// done.
	Paused *bool `json:"paused,omitempty"`
	// Error says why nothing was done; absent when OK.
	Error string `json:"error,omitempty"`
}

// queueAction serves POST pause or resume (what): it pauses or resumes
// the queue of the form's name, for every process, through the client of
// the form's client (New's if empty). A browser's form comes back to the
// overview, or to the queue's page when its field back is "queue".
func (h *handler) queueAction(w http.ResponseWriter, r *http.Request, what string) {
	res := QueueResult{Action: what}
	refuse := func(status int, msg string) {
		res.Error = msg
		refuseReply(w, r, status, msg, res)
	}
	if status, msg := readPost(w, r, formLimit); status != 0 {
		refuse(status, msg)
		return
	}
	res.Queue, res.Client = r.PostFormValue("name"), r.PostFormValue(clientParam)
	if status, msg := h.check(r, what); status != 0 {
		refuse(status, msg)
		return
	}
	owner := h.clientNamed(res.Client)
	if owner < 0 || !h.hasQueue(r, owner, res.Queue) {
		refuse(http.StatusBadRequest, "the form's name is not one of this client's queues")
		return
	}
	client := h.clients[owner].Client
	var err error
	if what == ActionPause {
		err = client.PauseQueue(r.Context(), res.Queue)
	} else {
		err = client.ResumeQueue(r.Context(), res.Queue)
	}
	if err != nil {
		refuse(http.StatusInternalServerError, err.Error())
		return
	}
	h.forget() // the next page shows the change
	paused := what == ActionPause
	res.OK, res.Paused = true, &paused
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	back := url.Values{"done": {what}, "name": {res.Queue}}
	if len(h.clients) > 1 {
		back.Set(clientParam, h.clients[owner].Name)
	}
	page := "./" // the overview's, or the queue page's (the form's back)
	if r.PostFormValue("back") == "queue" {
		page = "queue"
	}
	w.Header().Set("Location", page+"?"+back.Encode())
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
