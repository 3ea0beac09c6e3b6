package bunqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/wake"
)

// QueryHook returns a bun query hook that wakes this client's sleeping
// workers when a statement run through the hooked DB may have put rows in
// their queues, so that the rows need not wait for the poll interval.
// Workers in other processes find the rows by polling, or on PostgreSQL
// when a notification wakes them (Config.Listener). Give it to
// the *bun.DB the app writes through:
//
//	appDB := db.WithQueryHook(client.QueryHook()) // a copy of db with the hook
//
// (bun's older AddQueryHook works too, but is not safe while queries run.)
//
// The hook watches INSERT, REPLACE and UPDATE statements (with IGNORE, ON
// DUPLICATE KEY UPDATE, multi-table UPDATE; from query builders and raw SQL
// alike, read from the SQL text) on the tables of the queues this client
// started: each queue's model table, and bunqueue_jobs for the jobs queues,
// so that Enqueue through a hooked DB or bun.Tx wakes jobs workers too. For
// each such statement that changed rows it wakes one sleeping worker of
// every queue over that table (a worker that then claims a full batch
// wakes the next one):
//   - outside a transaction, as soon as the statement returns;
//   - in a transaction begun through the hooked DB and run with the
//     context bun gives the transaction (the ctx that RunInTx passes to its
//     function), when the transaction commits; a rollback wakes nothing;
//   - in a transaction but run with another context (typically
//     tx.NewInsert()….Exec(ctx) after db.BeginTx(ctx, nil)), the statement
//     cannot be tied to its transaction: it wakes at once and again after
//     the next commit the hook sees, which may be another transaction's.
//
// A wake that comes too early costs one claim that finds nothing; a wake
// that never comes costs the poll interval. The hook does not see writes
// made by other processes or through other DBs (polling finds them),
// DELETEs, or writes to other tables that make rows match a queue's query
// (a join, a NOT EXISTS). Writes undone by ROLLBACK TO SAVEPOINT still
// wake on commit; a statement run on the DB itself with a transaction's
// context counts as part of that transaction, and is lost with it if it
// rolls back. A write made with the context of one of the client's own
// workers (a handler, the library's claim and completion) does not wake
// that worker's queue: the worker claims again as soon as its batch ends.
// An INSERT into bunqueue_jobs wakes only the jobs queues whose names
// appear in it as string literals, or all of them if none does; an UPDATE
// of it made with a jobs worker's context (the library's leases,
// heartbeats and retries) wakes no jobs queue.
//
// The hook also ends the send spans of Enqueue and EnqueueMany given a
// bun.Tx and the context bun gives the transaction, as for the wake-up:
// such a span ends when the transaction does, at COMMIT as usual (with
// error.type and status Error if COMMIT failed), or at ROLLBACK with
// error.type "rolled_back" and status Error, since the job never
// existed; only a committed job counts in messaging.client.sent.messages.
// Without the hook, or with another context, the span ends when Enqueue
// returns and a rollback leaves it unmarked, as does a ROLLBACK TO
// SAVEPOINT.
//
// Cost: the hook allocates one context value per transaction, and for
// every other statement reads its first word; for an INSERT or UPDATE it
// parses the table names at the start of the statement and looks each up
// in a map. While a transaction begun through it is open, each statement
// costs two context lookups more. Only statements on watched tables do
// more: a context lookup and non-blocking sends on buffered channels. It is safe for concurrent
// use, never blocks and starts no goroutines. Before Start it wakes
// nothing. Each call returns a new hook; add one per DB.
func (c *Client) QueryHook() bun.QueryHook {
	return &wakeHook{c: c}
}

// watch is what the query hook needs of a started client: which runners
// watch which table.
type watch struct {
	tables map[string][]*watcher // by lower-case table name
}

// watcher is one runner watching one table.
type watcher struct {
	r       *runner
	schema  string // lower-case; "" for the connection's database
	jobs    bool   // a jobs queue
	literal string // the jobs queue's name as an SQL string literal, if known
}

// newWatch maps the tables of the runners Start built to the runners:
// first the queues', then the jobs queues'.
func (c *Client) newWatch(runners []*runner) *watch {
	w := &watch{tables: map[string][]*watcher{}}
	for i, r := range runners {
		wt := &watcher{r: r}
		name := migrate.JobsTable
		if r.table != nil {
			name = r.table.Name
			wt.schema = strings.ToLower(tableSchema(c.db, r.table))
		}
		if i >= len(c.queues) {
			wt.jobs = true
			for _, queue := range []string{r.Name, strings.TrimPrefix(r.Name, "jobs:")} {
				if _, ok := c.cfg.JobQueues[queue]; ok {
					wt.literal = string(c.db.Dialect().AppendString(nil, queue))
					break
				}
			}
		}
		name = strings.ToLower(name)
		w.tables[name] = append(w.tables[name], wt)
	}
	return w
}

// wakeHook is the bun.QueryHook returned by Client.QueryHook.
type wakeHook struct {
	c    *Client
	open atomic.Int64 // transactions begun through the hook, not yet ended

	pendingMu  sync.Mutex
	pending    []*watcher // woken after the next commit
	hasPending atomic.Bool
}

// markKey keys a transaction's mark in the context bun keeps for it.
type markKey struct{ h *wakeHook }

// txMark follows one transaction from BEGIN to COMMIT or ROLLBACK,
// collecting the watchers its statements woke and the send spans of the
// jobs it enqueued.
type txMark struct {
	mu    sync.Mutex
	ended bool
	woken []*watcher
	sends []func(sendEnd) // end a send span
}

// addSend keeps finish, to end a send span when the transaction ends,
// unless it has ended; it reports whether it did.
func (m *txMark) addSend(finish func(sendEnd)) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return false
	}
	m.sends = append(m.sends, finish)
	return true
}

// add records ws unless the transaction has ended; it reports whether it
// did.
func (m *txMark) add(ws []*watcher) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return false
	}
	for _, w := range ws {
		m.woken = appendNew(m.woken, w)
	}
	return true
}

// end ends the transaction and returns what it woke and the send spans
// to end; ok is false if it had ended already.
func (m *txMark) end() (ws []*watcher, sends []func(sendEnd), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, nil, false
	}
	m.ended = true
	ws, m.woken = m.woken, nil
	sends, m.sends = m.sends, nil
	return ws, sends, true
}

// sendKey keys the *pendingSend in the context of an Enqueue or
// EnqueueMany through a bun.Tx.
type sendKey struct{}

// pendingSend is the send span of an Enqueue through a bun.Tx. When the
// query hook sees one of the Enqueue's statements run with the context of
// a transaction it follows (the one RunInTx passes on), it ties the send
// to that transaction: the span then ends at COMMIT, or at ROLLBACK
// marked as rolled back, since the job never existed. Otherwise the span
// ends when Enqueue returns.
type pendingSend struct {
	mark atomic.Pointer[txMark]
}

// sendEnd is how a send span ends: with the send's own error, the
// COMMIT's, or rolled back.
type sendEnd struct {
	rolledBack bool
	err        error
}

// holdSend hands finish to the transaction that the send of ctx is tied
// to, and reports whether it did: finish then runs at COMMIT or ROLLBACK.
func holdSend(ctx context.Context, finish func(sendEnd)) bool {
	p, _ := ctx.Value(sendKey{}).(*pendingSend)
	if p == nil {
		return false
	}
	m := p.mark.Load()
	return m != nil && m.addSend(finish)
}

// tieSend ties the send of the Enqueue that ran a statement with ctx to
// the transaction of this hook's mark in ctx, if there are both.
func (h *wakeHook) tieSend(ctx context.Context) {
	p, _ := ctx.Value(sendKey{}).(*pendingSend)
	if p == nil || p.mark.Load() != nil {
		return
	}
	if m, _ := ctx.Value(markKey{h}).(*txMark); m != nil {
		p.mark.Store(m)
	}
}

// BeforeQuery puts a mark in the context bun keeps for a transaction.
func (h *wakeHook) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if e.IQuery == nil && e.Query == "BEGIN" {
		h.open.Add(1)
		return context.WithValue(ctx, markKey{h}, &txMark{})
	}
	return ctx
}

// AfterQuery ends transactions and wakes the workers of the tables a
// statement wrote, now or at commit.
func (h *wakeHook) AfterQuery(ctx context.Context, e *bun.QueryEvent) {
	if e.IQuery == nil && h.afterTxControl(ctx, e) {
		return
	}
	if e.Err == nil && h.open.Load() > 0 {
		h.tieSend(ctx) // an Enqueue's statement in a transaction begun through the hook
	}
	w := h.c.watching.Load()
	if w == nil || e.Err != nil {
		return
	}
	var hit [8]*watcher
	if ws := w.woken(ctx, e, hit[:0]); len(ws) > 0 {
		h.wakeAtCommit(ctx, ws)
	}
}

// woken appends to ws the watchers that the statement of e, run with
// ctx, wakes: those of the tables it wrote, if it changed rows, but not
// the queue of the worker that ran it (see notOwn) and, for an INSERT
// into the jobs table, only the jobs queues it names (see
// byQueueLiteral).
func (w *watch) woken(ctx context.Context, e *bun.QueryEvent, ws []*watcher) []*watcher {
	var buf [4]wake.Table
	op, refs := wake.Targets(e.Query, buf[:0])
	if op == wake.NotWrite {
		return nil
	}
	ws = w.of(refs, ws)
	if len(ws) == 0 || unchanged(e) {
		return nil
	}
	if self := engine.WorkerOf(ctx); self != nil {
		ws = notOwn(ws, self, op)
	}
	if op == wake.Insert {
		ws = byQueueLiteral(ws, e.Query)
		if f, _ := ctx.Value(handOverKey{}).(*engine.Feed); f != nil {
			ws = slices.DeleteFunc(ws, func(w *watcher) bool { return &w.r.Queue == f.Queue() }) // handed over: see handover.go
		}
	}
	return ws
}

// of appends to ws the watchers of the tables of refs. A name without a
// schema matches the table in any schema.
func (w *watch) of(refs []wake.Table, ws []*watcher) []*watcher {
	for _, ref := range refs {
		for _, wt := range w.tables[ref.Name] {
			if ref.Schema == "" || wt.schema == "" || ref.Schema == wt.schema {
				ws = appendNew(ws, wt)
			}
		}
	}
	return ws
}

// unchanged reports whether the statement of e is known to have changed
// no row. Asked only of statements on watched tables: it costs a call
// into the driver's result.
func unchanged(e *bun.QueryEvent) bool {
	if e.Result == nil {
		return false
	}
	n, err := e.Result.RowsAffected()
	return err == nil && n == 0
}

// notOwn leaves out of ws, the watchers woken by a write made with the
// context of a worker of self, self's own queue: the worker claims again
// as soon as its batch ends. A jobs worker's UPDATEs of the jobs table
// are the library's (leases, heartbeats, retries), on jobs of its own
// queue: they wake no jobs queue.
func notOwn(ws []*watcher, self *engine.Queue, op wake.Op) []*watcher {
	jobsWorker := false
	for _, wt := range ws {
		jobsWorker = jobsWorker || op == wake.Update && &wt.r.Queue == self && wt.jobs
	}
	kept := ws[:0]
	for _, wt := range ws {
		if &wt.r.Queue != self && !(jobsWorker && wt.jobs) {
			kept = append(kept, wt)
		}
	}
	return kept
}

// wakeAtCommit wakes ws when the transaction that ctx's mark follows
// commits. Without a mark it wakes them now and, while a transaction
// begun through the hook is open (the statement may be part of it, run
// with a context that does not name it), again after the next commit.
func (h *wakeHook) wakeAtCommit(ctx context.Context, ws []*watcher) {
	if m, _ := ctx.Value(markKey{h}).(*txMark); m != nil && m.add(ws) {
		return // woken at commit
	}
	wakeAll(ws)
	if h.open.Load() == 0 {
		return
	}
	h.pendingMu.Lock()
	for _, wt := range ws {
		h.pending = appendNew(h.pending, wt)
	}
	h.hasPending.Store(true)
	h.pendingMu.Unlock()
}

// afterTxControl ends the hook's view of a transaction after its BEGIN
// failed, its COMMIT or its ROLLBACK, waking the queues that its writes
// woke, and finishing its sends. It reports whether e was one of those.
func (h *wakeHook) afterTxControl(ctx context.Context, e *bun.QueryEvent) bool {
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
		ws, sends := h.end(ctx)
		wakeAll(ws)
		h.flushPending()
		end := sendEnd{}
		if e.Err != nil {
			end.err = fmt.Errorf("the transaction's COMMIT failed, so the job may not exist: %w", e.Err)
		}
		for _, finish := range sends {
			finish(end)
		}
		return true
	case "ROLLBACK":
		_, sends := h.end(ctx)
		for _, finish := range sends {
			finish(sendEnd{rolledBack: true})
		}
		return true
	}
	return false
}

// end ends the transaction whose mark ctx holds, and returns what it
// woke and the send spans to end.
func (h *wakeHook) end(ctx context.Context) ([]*watcher, []func(sendEnd)) {
	m, _ := ctx.Value(markKey{h}).(*txMark)
	if m == nil {
		return nil, nil
	}
	ws, sends, ok := m.end()
	if ok {
		h.open.Add(-1)
	}
	return ws, sends
}

// flushPending wakes what statements outside a known transaction woke
// since the last commit.
func (h *wakeHook) flushPending() {
	if !h.hasPending.Load() {
		return
	}
	h.pendingMu.Lock()
	ws := h.pending
	h.pending = nil
	h.hasPending.Store(false)
	h.pendingMu.Unlock()
	wakeAll(ws)
}

// wakeAll wakes the runners of ws.
func wakeAll(ws []*watcher) {
	for _, w := range ws {
		w.r.Poke()
	}
}

func appendNew(ws []*watcher, w *watcher) []*watcher {
	for _, x := range ws {
		if x == w {
			return ws
		}
	}
	return append(ws, w)
}

// byQueueLiteral keeps, of the watchers of an INSERT, those of the jobs
// queues named in it as string literals, if it names any.
func byQueueLiteral(ws []*watcher, query string) []*watcher {
	named := false
	for _, w := range ws {
		if w.literal != "" && strings.Contains(query, w.literal) {
			named = true
			break
		}
	}
	if !named {
		return ws
	}
	kept := ws[:0]
	for _, w := range ws {
		if w.literal == "" || strings.Contains(query, w.literal) { // "": not a jobs queue, or its name is unknown
			kept = append(kept, w)
		}
	}
	return kept
}
