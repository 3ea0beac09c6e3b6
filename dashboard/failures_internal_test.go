package dashboard

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/bunqueue/bunqueue"
)

// Recent failures group by client, queue and error, the latest first;
// a group links its queue (a table queue's page, a jobs queue's jobs)
// and a job's row to its page, each with its client; the pages hold ten
// groups, and a page past the last is the last.
func TestGroupFailures(t *testing.T) {
	h := &handler{clients: []Client{{Name: "billing"}, {Name: "mail"}}}
	now := time.Date(2025, 6, 3, 14, 0, 0, 0, time.UTC)
	d := &Data{
		Queues: []bunqueue.QueueStats{
			{Name: "orders", Kind: bunqueue.QueueKindTable},
			{Name: "emails", Kind: bunqueue.QueueKindJobs},
			{Name: "orders", Kind: bunqueue.QueueKindJobs},
		},
		queueOwners: []int{0, 0, 1},
	}
	add := func(owner int, queue, key, err string) {
		d.RecentFailures = append(d.RecentFailures, bunqueue.Failure{Queue: queue, Key: key, Error: err, At: now.Add(-time.Duration(len(d.RecentFailures)) * time.Second)})
		d.failureOwners = append(d.failureOwners, owner)
	}
	add(0, "orders", "id=7", "declined")
	add(1, "orders", "id=7", "declined") // mail's orders: another group
	add(0, "emails", "id=42", "smtp 550")
	add(0, "orders", "id=8", "declined")
	add(0, "orders", "id=7", "declined") // the same row again
	add(0, "gone", "id=1", "old")        // a queue Stats no longer lists
	p := h.groupFailures(d, 1)
	want := []failureGroup{
		{Client: "billing", Queue: "orders", Link: "queue?client=billing&name=orders", Error: "declined", Count: 3, Rows: 2,
			Keys: []failureKey{{Key: "id=7"}, {Key: "id=8"}}, Last: now, First: now.Add(-4 * time.Second)},
		{Client: "mail", Queue: "orders", Link: "jobs?client=mail&queue=orders", Error: "declined", Count: 1, Rows: 1,
			Keys: []failureKey{{Key: "id=7", Link: "job?client=mail&id=7"}}, Last: now.Add(-time.Second), First: now.Add(-time.Second)},
		{Client: "billing", Queue: "emails", Link: "jobs?client=billing&queue=emails", Error: "smtp 550", Count: 1, Rows: 1,
			Keys: []failureKey{{Key: "id=42", Link: "job?client=billing&id=42"}}, Last: now.Add(-2 * time.Second), First: now.Add(-2 * time.Second)},
		{Client: "billing", Queue: "gone", Error: "old", Count: 1, Rows: 1, Keys: []failureKey{{Key: "id=1"}}, Last: now.Add(-5 * time.Second), First: now.Add(-5 * time.Second)},
	}
	if !reflect.DeepEqual(p.Groups, want) {
		t.Errorf("groups:\n%+v\nwant\n%+v", p.Groups, want)
	}
	if got := (failurePage{Page: 1, Pages: 1, From: 1, To: 4, Total: 4, Counted: 6, Groups: want}); !reflect.DeepEqual(p, got) {
		t.Errorf("page: %+v, want %+v", p, got)
	}

	d.RecentFailures, d.failureOwners = nil, nil
	for i := range 23 {
		add(0, "orders", fmt.Sprintf("id=%d", i), fmt.Sprintf("error %d", i))
	}
	for _, tc := range []struct{ ask, page, from, to, n int }{{1, 1, 1, 10, 10}, {2, 2, 11, 20, 10}, {3, 3, 21, 23, 3}, {9, 3, 21, 23, 3}} {
		p := h.groupFailures(d, tc.ask)
		if p.Page != tc.page || p.From != tc.from || p.To != tc.to || len(p.Groups) != tc.n || p.Pages != 3 || p.Total != 23 {
			t.Errorf("page %d: %+v", tc.ask, p)
		}
	}
	if p := h.groupFailures(&Data{}, 1); p.Page != 1 || p.Pages != 1 || len(p.Groups) != 0 {
		t.Errorf("no failures: %+v", p)
	}
}
