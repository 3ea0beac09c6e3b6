package idle

import (
	"testing"
	"time"

	"github.com/uptrace/bun"
)

// testFeed is a Feed of a poll interval, whose probes are never built.
type testFeed struct{ poll time.Duration }

func (f *testFeed) Poll() time.Duration            { return f.poll }
func (f *testFeed) Probe(bun.IDB) *bun.SelectQuery { return nil }
func (f *testFeed) Found()                         {}

// A probe that took longer than its interval is not followed at once by
// the next: the group's next probe is a poll interval after the probe
// ended, not after it began.
func TestIdleNextProbeFromTheEndOfTheLast(t *testing.T) {
	const poll = time.Second
	w := New(Config{})
	w.Add(&testFeed{poll: poll})
	began := time.Now().Add(2 * poll) // the first probe is due by then
	groups := w.due(began)
	if len(groups) != 1 || groups[0].poll != poll || len(groups[0].feeds) != 1 {
		t.Fatalf("due: %+v, want one group of one feed", groups)
	}
	end := began.Add(3 * poll) // the probe took three intervals
	w.probed(poll, end)
	if wait, ok := w.next(end); !ok || wait < poll*3/4 || wait > poll {
		t.Errorf("next probe %s after the last ended (ok %v), want within [%s, %s]", wait, ok, poll*3/4, poll)
	}
	// A group whose feeds all left during the probe stays gone.
	w.Remove(groups[0].feeds[0])
	w.probed(poll, end)
	if _, ok := w.next(end); ok {
		t.Error("a probe rescheduled a group with no feeds")
	}
}
