package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// Client is one more client whose queues a dashboard shows, next to
// those of the client given to New (Options.Clients).
type Client struct {
	// Name names the client on the page, in the queues table's Client
	// column: the app's name for it, such as "billing". It must not be
	// empty, and no two of a dashboard's clients may share one.
	Name string
	// Client is the client.
	Client *bunqueue.Client
}

// ClientNameDefault is the name of New's client when Options.Clients is
// set and Options.ClientName is not.
const ClientNameDefault = "main"

// clientsOf returns the dashboard's clients: client, named by
// o.ClientName, then o.Clients. It panics on a nil client, an empty name
// or one used twice.
func clientsOf(client *bunqueue.Client, o Options) []Client {
	name := o.ClientName
	if name == "" {
		name = ClientNameDefault
	}
	all := append([]Client{{Name: name, Client: client}}, o.Clients...)
	seen := map[string]bool{}
	for i, c := range all[1:] {
		switch {
		case c.Client == nil:
			panic(fmt.Sprintf("dashboard: Options.Clients[%d] (%q): Client must not be nil", i, c.Name))
		case c.Name == "":
			panic(fmt.Sprintf("dashboard: Options.Clients[%d]: Name must not be empty", i))
		}
	}
	for _, c := range all {
		if seen[c.Name] {
			panic(fmt.Sprintf("dashboard: Options: the client name %q is used twice (ClientName, Clients)", c.Name))
		}
		seen[c.Name] = true
	}
	return all
}

// readStats reads the stats of every client, in the order of h.clients,
// and the index in h.clients of each queue's client. An error names the
// client when there are several.
func (h *handler) readStats(r *http.Request) ([]bunqueue.QueueStats, []int, error) {
	var all []bunqueue.QueueStats
	var owners []int
	var errs []error
	for i, c := range h.clients {
		stats, err := c.Client.Stats(r.Context())
		if err != nil && len(h.clients) > 1 {
			err = fmt.Errorf("client %q: %w", c.Name, err)
		}
		errs = append(errs, err)
		all = append(all, stats...)
		for range stats {
			owners = append(owners, i)
		}
	}
	return all, owners, errors.Join(errs...)
}

// clientNames returns the name of each queue's client, or nil when the
// dashboard shows one client.
func (h *handler) clientNames(owners []int) []string {
	if len(h.clients) < 2 {
		return nil
	}
	names := make([]string, len(owners))
	for i, o := range owners {
		names[i] = h.clients[o].Name
	}
	return names
}

// clientNamed returns the index in h.clients of the client of the form's
// name ("" for New's), or -1.
func (h *handler) clientNamed(name string) int {
	if name == "" {
		return 0
	}
	for i, c := range h.clients {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// clientParam is the query or form field that names the client whose
// jobs, job, queue page and job actions a request is about: a Client.Name
// or Options.ClientName; absent means New's client.
const clientParam = "client"

// clientIndex returns the index in h.clients of the client name names
// ("" for New's), or an error that says which names there are.
func (h *handler) clientIndex(name string) (int, error) {
	if i := h.clientNamed(name); i >= 0 {
		return i, nil
	}
	names := make([]string, len(h.clients))
	for i, c := range h.clients {
		names[i] = strconv.Quote(c.Name)
	}
	return 0, fmt.Errorf("%s %q is not one of this dashboard's clients (%s)", clientParam, name, strings.Join(names, ", "))
}

// chosen returns the index in h.clients of the client r names, in its
// form once parsed (its body, then its query), else in its query; 0 for
// none or a name of no client, which ofClient and jobAction refuse
// before anything is read.
func (h *handler) chosen(r *http.Request) int {
	name := r.URL.Query().Get(clientParam)
	if r.Form != nil {
		name = r.Form.Get(clientParam)
	}
	return max(h.clientNamed(name), 0)
}

// clientOf returns the client whose jobs r reads or acts on.
func (h *handler) clientOf(r *http.Request) *bunqueue.Client { return h.clients[h.chosen(r)].Client }

// ofClient serves r with serve if its query's client, if any, is one of
// the dashboard's; else it answers 400, saying which are.
func (h *handler) ofClient(serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := h.clientIndex(r.URL.Query().Get(clientParam)); err != nil {
			h.problem(w, r, http.StatusBadRequest, "The address's "+err.Error()+".")
			return
		}
		serve(w, r)
	}
}

// depthKey is the key of a queue of client i in the depths.
func depthKey(i int, queue string) string {
	if i == 0 {
		return queue
	}
	return fmt.Sprintf("%d\x00%s", i, queue)
}

// recentFailures returns the latest failures of every client, newest
// first, at most bunqueue.RecentFailuresLimit, and the index in h.clients
// of each one's client.
func (h *handler) recentFailures() ([]bunqueue.Failure, []int) {
	type owned struct {
		bunqueue.Failure
		owner int
	}
	var all []owned
	for i, c := range h.clients {
		for _, f := range c.Client.RecentFailures() {
			all = append(all, owned{f, i})
		}
	}
	slices.SortStableFunc(all, func(a, b owned) int { return cmp.Compare(b.At.UnixNano(), a.At.UnixNano()) })
	all = all[:min(len(all), bunqueue.RecentFailuresLimit)]
	failures, owners := make([]bunqueue.Failure, len(all)), make([]int, len(all))
	for i, f := range all {
		failures[i], owners[i] = f.Failure, f.owner
	}
	return failures, owners
}

// namedCharts prefixes each queue's charts with its client's name, when
// the dashboard shows several clients.
func namedCharts(charts []queueCharts, names []string) []queueCharts {
	if len(names) != len(charts) {
		return charts
	}
	for i := range charts {
		charts[i].Queue = names[i] + " · " + charts[i].Queue
	}
	return charts
}

// forget makes the next stats read the database again, after an action
// changed what they show.
func (h *handler) forget() {
	h.mu.Lock()
	h.when = time.Time{}
	h.mu.Unlock()
}
