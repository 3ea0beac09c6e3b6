package dashboard

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// The overview's recent failures: groups a page, and rows named a group.
const (
	failureGroupsShown = 10
	failureKeysShown   = 5
)

// recentParam is the overview's query parameter of the page of recent
// failures' groups, from 1.
const recentParam = "recent"

// failureGroup is the recent failures of one queue (of one client) with
// one error, as the overview lists them.
type failureGroup struct {
	// Client names the queue's client when the dashboard has several.
	Client string
	Queue  string
	// Link is the address of the queue's page (a table queue) or of its
	// jobs (a jobs queue), or "" for a queue Stats no longer lists.
	Link  string
	Error string
	// Count is how many of the recent failures the group holds, and
	// Rows how many rows or jobs they were.
	Count, Rows int
	// Keys are the first failureKeysShown of those rows, latest failure
	// first.
	Keys []failureKey
	// First and Last are when the group's oldest and latest failures
	// were counted.
	First, Last time.Time
}

// failureKey is a row of a failure group: its key, and the address of
// its job's page for a jobs queue's ("" for a table's row).
type failureKey struct {
	Key  string
	Link string
}

// MoreRows is how many of the group's rows Keys leaves out.
func (g failureGroup) MoreRows() int { return g.Rows - len(g.Keys) }

// failurePage is the page of recent failures' groups the overview shows.
type failurePage struct {
	Groups []failureGroup
	// Page is the page's number, from 1, of Pages; From and To number its
	// first and last groups, of Total groups, from Counted failures.
	Page, Pages, From, To, Total, Counted int
}

// recentPageOf reads the page of recent failures of q: 1 when absent or
// not a positive number.
func recentPageOf(q url.Values) int {
	n, err := strconv.Atoi(q.Get(recentParam))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// groupFailures groups d's recent failures (newest first) by client,
// queue and error, the group of the latest failure first, and returns
// the groups of page (the last page if page is past it).
func (h *handler) groupFailures(d *Data, page int) failurePage {
	type groupKey struct {
		owner        int
		queue, error string
	}
	kinds := map[groupKey]bunqueue.QueueKind{}
	for i, q := range d.Queues {
		kinds[groupKey{owner: d.queueOwners[i], queue: q.Name}] = q.Kind
	}
	var groups []failureGroup
	at := map[groupKey]int{}
	seen := map[groupKey]map[string]bool{}
	for i, f := range d.RecentFailures {
		owner := d.failureOwners[i]
		k := groupKey{owner, f.Queue, f.Error}
		g, ok := at[k]
		if !ok {
			g = len(groups)
			at[k], seen[k] = g, map[string]bool{}
			groups = append(groups, h.newGroup(owner, f, kinds[groupKey{owner: owner, queue: f.Queue}]))
		}
		grp := &groups[g]
		grp.Count++
		grp.First = f.At.UTC()
		if seen[k][f.Key] {
			continue
		}
		seen[k][f.Key] = true
		grp.Rows++
		if len(grp.Keys) < failureKeysShown {
			grp.Keys = append(grp.Keys, h.failureKey(owner, f.Key, kinds[groupKey{owner: owner, queue: f.Queue}]))
		}
	}
	p := failurePage{Total: len(groups), Counted: len(d.RecentFailures), Pages: max(1, (len(groups)+failureGroupsShown-1)/failureGroupsShown)}
	p.Page = min(page, p.Pages)
	p.From = (p.Page - 1) * failureGroupsShown
	p.To = min(p.From+failureGroupsShown, len(groups))
	p.Groups = groups[p.From:p.To]
	p.From++
	return p
}

// newGroup returns the group of failure f of client owner's queue, of
// kind ("" if Stats does not list it), before it counts f.
func (h *handler) newGroup(owner int, f bunqueue.Failure, kind bunqueue.QueueKind) failureGroup {
	g := failureGroup{Queue: f.Queue, Error: f.Error, Last: f.At.UTC()}
	q := url.Values{}
	if len(h.clients) > 1 {
		g.Client = h.clients[owner].Name
		q.Set(clientParam, g.Client)
	}
	switch kind {
	case bunqueue.QueueKindTable:
		q.Set("name", f.Queue)
		g.Link = "queue?" + q.Encode()
	case bunqueue.QueueKindJobs:
		q.Set("queue", f.Queue)
		g.Link = "jobs?" + q.Encode()
	}
	return g
}

// failureKey returns the row key of a failure of client owner's queue of
// kind, linked to its job's page when it is a job's ("id=42").
func (h *handler) failureKey(owner int, key string, kind bunqueue.QueueKind) failureKey {
	fk := failureKey{Key: key}
	id, err := strconv.ParseInt(strings.TrimPrefix(key, "id="), 10, 64)
	if kind != bunqueue.QueueKindJobs || !strings.HasPrefix(key, "id=") || err != nil || id <= 0 {
		return fk
	}
	q := url.Values{"id": {strconv.FormatInt(id, 10)}}
	if len(h.clients) > 1 {
		q.Set(clientParam, h.clients[owner].Name)
	}
	fk.Link = "job?" + q.Encode()
	return fk
}
