package wake

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
)

// testQueue returns a queue whose pokes can be counted (see poked).
func testQueue() *engine.Queue { return &engine.Queue{Wake: make(chan struct{}, 1)} }

// poked reports whether q was poked since the last call.
func poked(q *engine.Queue) bool {
	select {
	case <-q.Wake:
		return true
	default:
		return false
	}
}

type handOverKey struct{}

// testHook returns a hook watching table t with one table queue, and the
// jobs table with the jobs queues "a" and "b".
func testHook() (h *Hook, t, a, b *engine.Queue) {
	t, a, b = testQueue(), testQueue(), testQueue()
	var w Watch
	w.Add(Target{Queue: t, Table: "T"})
	w.Add(Target{Queue: a, Table: "bunqueue_jobs", Jobs: true, Literal: "'a'"})
	w.Add(Target{Queue: b, Table: "bunqueue_jobs", Jobs: true, Literal: "'b'"})
	var watching atomic.Pointer[Watch]
	h = NewHook(&watching, handOverKey{})
	watching.Store(&w)
	return h, t, a, b
}

// run runs query through h with ctx, as bun does.
func run(h *Hook, ctx context.Context, query string, err error) context.Context {
	e := &bun.QueryEvent{Query: query, Err: err}
	ctx = h.BeforeQuery(ctx, e)
	h.AfterQuery(ctx, e)
	return ctx
}

// A write outside a transaction wakes the queues of its table at once;
// an INSERT into the jobs table only the jobs queues it names, if any.
func TestHookWakesAtOnceOutsideATransaction(t *testing.T) {
	h, q, a, b := testHook()
	run(h, t.Context(), "SELECT * FROM t", nil)
	require.False(t, poked(q), "not a write")
	run(h, t.Context(), "UPDATE `T` SET x = 1", errors.New("failed"))
	require.False(t, poked(q), "a failed statement")
	run(h, t.Context(), "UPDATE `T` SET x = 1", nil)
	require.True(t, poked(q))
	run(h, t.Context(), "INSERT INTO bunqueue_jobs (queue) VALUES ('b')", nil)
	require.Equal(t, []bool{false, true}, []bool{poked(a), poked(b)}, "only the queue it names")
	run(h, t.Context(), "INSERT INTO bunqueue_jobs (queue) VALUES ('c')", nil)
	require.Equal(t, []bool{true, true}, []bool{poked(a), poked(b)}, "names none: all")
}

// A write in a transaction begun through the hook wakes at its COMMIT;
// one run with another context at once and again after the next commit.
func TestHookWakesAtCommit(t *testing.T) {
	h, q, _, _ := testHook()
	tx := run(h, t.Context(), "BEGIN", nil)
	run(h, tx, "INSERT INTO t VALUES (1)", nil)
	require.False(t, poked(q), "not before COMMIT")
	run(h, tx, "COMMIT", nil)
	require.True(t, poked(q))

	tx = run(h, t.Context(), "BEGIN", nil)
	run(h, tx, "INSERT INTO t VALUES (1)", nil)
	run(h, tx, "ROLLBACK", nil)
	require.False(t, poked(q), "a rollback wakes nothing")

	tx = run(h, t.Context(), "BEGIN", nil)
	run(h, t.Context(), "INSERT INTO t VALUES (1)", nil) // the transaction's, maybe
	require.True(t, poked(q), "at once")
	run(h, tx, "COMMIT", nil)
	require.True(t, poked(q), "and again after the next commit")
}

// A send tied to a transaction ends at its COMMIT or ROLLBACK.
func TestHookEndsTiedSends(t *testing.T) {
	h, _, _, _ := testHook()
	for _, end := range []string{"COMMIT", "ROLLBACK"} {
		tx := run(h, t.Context(), "BEGIN", nil)
		p := &PendingSend{}
		run(h, context.WithValue(tx, SendKey{}, p), "INSERT INTO other VALUES (1)", nil)
		require.True(t, p.Tied(), end)
		var ended []SendEnd
		require.True(t, p.Hold(func(e SendEnd) { ended = append(ended, e) }), end)
		run(h, tx, end, nil)
		require.Equal(t, []SendEnd{{RolledBack: end == "ROLLBACK"}}, ended, end)
		require.False(t, p.Hold(func(SendEnd) {}), "ended")
	}
	var p *PendingSend
	require.False(t, p.Tied() || p.Hold(func(SendEnd) {}), "no Enqueue through a bun.Tx")
}

// A worker's own writes do not wake its queue; a jobs worker's UPDATEs
// (leases, heartbeats, retries) wake no jobs queue.
func TestNotOwn(t *testing.T) {
	h, q, a, _ := testHook()
	ts := h.watching.Load().tables["bunqueue_jobs"]
	require.Equal(t, []*Target{ts[1]}, notOwn(slices.Clone(ts), a, Insert), "a's own INSERT wakes b")
	require.Empty(t, notOwn(slices.Clone(ts), a, Update), "a jobs worker's UPDATE wakes no jobs queue")
	require.Equal(t, ts, notOwn(slices.Clone(ts), q, Update), "a table worker's wakes them")
}

// An Enqueue that hands its job to a feed does not wake that queue.
func TestHookLeavesOutTheHandedOverQueue(t *testing.T) {
	h, _, a, b := testHook()
	f := engine.NewFeed(a)
	ctx := context.WithValue(t.Context(), handOverKey{}, f)
	run(h, ctx, "INSERT INTO bunqueue_jobs (queue) VALUES ('x')", nil)
	require.Equal(t, []bool{false, true}, []bool{poked(a), poked(b)})
}
