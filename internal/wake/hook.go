package wake

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"
)

// Hook is the bun.QueryHook of the client's QueryHook: it wakes the
// targets of the tables a statement wrote, at once or when the
// transaction it ran in commits, and ends the send spans tied to a
// transaction (see PendingSend) when it ends.
type Hook struct {
	watching *atomic.Pointer[Watch] // holds nil until the client starts
	handOver any                    // the context key of an Enqueue's *engine.Feed
	open     atomic.Int64           // transactions begun through the hook, not yet ended

	pendingMu  sync.Mutex
	pending    []*Target // woken after the next commit
	hasPending atomic.Bool
}

// NewHook returns a hook that wakes the targets of the Watch in
// watching, read at every statement. handOver is the context key of the
// *engine.Feed that an Enqueue hands its job to: the hook does not wake
// that feed's queue for the INSERT, whose job needs no read.
func NewHook(watching *atomic.Pointer[Watch], handOver any) *Hook {
	return &Hook{watching: watching, handOver: handOver}
}

// markKey keys a transaction's mark in the context bun keeps for it.
type markKey struct{ h *Hook }

// txMark follows one transaction from BEGIN to COMMIT or ROLLBACK,
// collecting the targets its statements woke and the send spans of the
// jobs it enqueued.
type txMark struct {
	mu    sync.Mutex
	ended bool
	woken []*Target
	sends []func(SendEnd) // end a send span
}

// addSend keeps finish, to end a send span when the transaction ends,
// unless it has ended; it reports whether it did.
func (m *txMark) addSend(finish func(SendEnd)) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return false
	}
	m.sends = append(m.sends, finish)
	return true
}

// add records ts unless the transaction has ended; it reports whether it
// did.
func (m *txMark) add(ts []*Target) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return false
	}
	for _, t := range ts {
		m.woken = appendNew(m.woken, t)
	}
	return true
}

// end ends the transaction and returns what it woke and the send spans
// to end; ok is false if it had ended already.
func (m *txMark) end() (ts []*Target, sends []func(SendEnd), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, nil, false
	}
	m.ended = true
	ts, m.woken = m.woken, nil
	sends, m.sends = m.sends, nil
	return ts, sends, true
}

// SendKey keys the *PendingSend in the context of an Enqueue or
// EnqueueMany through a bun.Tx.
type SendKey struct{}

// PendingSend is the send span of an Enqueue through a bun.Tx. When the
// query hook sees one of the Enqueue's statements run with the context of
// a transaction it follows (the one RunInTx passes on), it ties the send
// to that transaction: the span then ends at COMMIT, or at ROLLBACK
// marked as rolled back, since the job never existed. Otherwise the span
// ends when Enqueue returns.
type PendingSend struct {
	mark atomic.Pointer[txMark]
}

// SendEnd is how a send span tied to a transaction ends: at COMMIT,
// with the COMMIT's error if it failed, or rolled back.
type SendEnd struct {
	RolledBack bool
	Err        error
}

// Tied reports whether the hook tied p to a transaction; p may be nil.
// The transaction may have ended since: Hold tells.
func (p *PendingSend) Tied() bool {
	return p != nil && p.mark.Load() != nil
}

// Hold hands finish to the transaction that p is tied to, and reports
// whether it did: finish then runs at COMMIT or ROLLBACK. p may be nil.
func (p *PendingSend) Hold(finish func(SendEnd)) bool {
	if p == nil {
		return false
	}
	m := p.mark.Load()
	return m != nil && m.addSend(finish)
}

// tieSend ties the send of the Enqueue that ran a statement with ctx to
// the transaction of this hook's mark in ctx, if there are both.
func (h *Hook) tieSend(ctx context.Context) {
	p, _ := ctx.Value(SendKey{}).(*PendingSend)
	if p == nil || p.mark.Load() != nil {
		return
	}
	if m, _ := ctx.Value(markKey{h}).(*txMark); m != nil {
		p.mark.Store(m)
	}
}

// BeforeQuery puts a mark in the context bun keeps for a transaction.
func (h *Hook) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if e.IQuery == nil && e.Query == "BEGIN" {
		h.open.Add(1)
		return context.WithValue(ctx, markKey{h}, &txMark{})
	}
	return ctx
}

// AfterQuery ends transactions and wakes the targets of the tables a
// statement wrote, now or at commit.
func (h *Hook) AfterQuery(ctx context.Context, e *bun.QueryEvent) {
	if e.IQuery == nil && h.afterTxControl(ctx, e) {
		return
	}
	if e.Err == nil && h.open.Load() > 0 {
		h.tieSend(ctx) // an Enqueue's statement in a transaction begun through the hook
	}
	w := h.watching.Load()
	if w == nil || e.Err != nil {
		return
	}
	var hit [8]*Target
	if ts := w.woken(ctx, e, h.handOver, hit[:0]); len(ts) > 0 {
		h.wakeAtCommit(ctx, ts)
	}
}

// wakeAtCommit wakes ts when the transaction that ctx's mark follows
// commits. Without a mark it wakes them now and, while a transaction
// begun through the hook is open (the statement may be part of it, run
// with a context that does not name it), again after the next commit.
func (h *Hook) wakeAtCommit(ctx context.Context, ts []*Target) {
	if m, _ := ctx.Value(markKey{h}).(*txMark); m != nil && m.add(ts) {
		return // woken at commit
	}
	wakeAll(ts)
	if h.open.Load() == 0 {
		return
	}
	h.pendingMu.Lock()
	for _, t := range ts {
		h.pending = appendNew(h.pending, t)
	}
	h.hasPending.Store(true)
	h.pendingMu.Unlock()
}

// afterTxControl ends the hook's view of a transaction after its BEGIN
// failed, its COMMIT or its ROLLBACK, waking the queues that its writes
// woke, and finishing its sends. It reports whether e was one of those.
func (h *Hook) afterTxControl(ctx context.Context, e *bun.QueryEvent) bool {
	switch e.Query {
	case "BEGIN":
		// A failed BEGIN, or "BEGIN" run as a plain statement (it has
		// a result), starts no transaction of bun's.
		if e.Err != nil || e.Result != nil {
			h.end(ctx)
		}
		return true
	case "COMMIT":
		// Even a failed COMMIT may have committed: wake.
		ts, sends := h.end(ctx)
		wakeAll(ts)
		h.flushPending()
		end := SendEnd{}
		if e.Err != nil {
			end.Err = fmt.Errorf("the transaction's COMMIT failed, so the job may not exist: %w", e.Err)
		}
		for _, finish := range sends {
			finish(end)
		}
		return true
	case "ROLLBACK":
		_, sends := h.end(ctx)
		for _, finish := range sends {
			finish(SendEnd{RolledBack: true})
		}
		return true
	}
	return false
}

// end ends the transaction whose mark ctx holds, and returns what it
// woke and the send spans to end.
func (h *Hook) end(ctx context.Context) ([]*Target, []func(SendEnd)) {
	m, _ := ctx.Value(markKey{h}).(*txMark)
	if m == nil {
		return nil, nil
	}
	ts, sends, ok := m.end()
	if ok {
		h.open.Add(-1)
	}
	return ts, sends
}

// flushPending wakes what statements outside a known transaction woke
// since the last commit.
func (h *Hook) flushPending() {
	if !h.hasPending.Load() {
		return
	}
	h.pendingMu.Lock()
	ts := h.pending
	h.pending = nil
	h.hasPending.Store(false)
	h.pendingMu.Unlock()
	wakeAll(ts)
}
