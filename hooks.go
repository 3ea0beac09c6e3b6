package bunqueue

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// QueryHook returns a bun query hook that wakes this client's sleeping
// workers when a statement run through the hooked DB may have put rows in
// their queues, so that the rows need not wait for the poll interval.
// Workers in other processes still find the rows by polling. Give it to
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
// Cost: the hook allocates one context value per transaction, and for
// every other statement reads its first word; for an INSERT or UPDATE it
// parses the table names at the start of the statement and looks each up
// in a map. Only statements on watched tables do more: a context lookup
// and non-blocking sends on buffered channels. It is safe for concurrent
// use, never blocks and starts no goroutines. Before Start it wakes
// nothing. Each call returns a new hook; add one per DB.
func (c *Client) QueryHook() bun.QueryHook {
	return &queryHook{c: c}
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
			for _, queue := range []string{r.name, strings.TrimPrefix(r.name, "jobs:")} {
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

// workerKey marks the context of a worker: the value is its runner.
type workerKey struct{}

// workerContext marks ctx as the context of a worker of r, so that the
// query hook does not wake r for the worker's own writes.
func workerContext(ctx context.Context, r *runner) context.Context {
	return context.WithValue(ctx, workerKey{}, r)
}

// queryHook is the bun.QueryHook returned by Client.QueryHook.
type queryHook struct {
	c    *Client
	open atomic.Int64 // transactions begun through the hook, not yet ended

	pendingMu  sync.Mutex
	pending    []*watcher // woken after the next commit
	hasPending atomic.Bool
}

// markKey keys a transaction's mark in the context bun keeps for it.
type markKey struct{ h *queryHook }

// txMark follows one transaction from BEGIN to COMMIT or ROLLBACK,
// collecting the watchers its statements woke.
type txMark struct {
	mu    sync.Mutex
	ended bool
	woken []*watcher
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

// end ends the transaction and returns what it woke; ok is false if it
// had ended already.
func (m *txMark) end() (ws []*watcher, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, false
	}
	m.ended = true
	ws, m.woken = m.woken, nil
	return ws, true
}

// BeforeQuery puts a mark in the context bun keeps for a transaction.
func (h *queryHook) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if e.IQuery == nil && e.Query == "BEGIN" {
		h.open.Add(1)
		return context.WithValue(ctx, markKey{h}, &txMark{})
	}
	return ctx
}

// AfterQuery ends transactions and wakes the workers of the tables a
// statement wrote, now or at commit.
func (h *queryHook) AfterQuery(ctx context.Context, e *bun.QueryEvent) {
	if e.IQuery == nil {
		switch e.Query {
		case "BEGIN":
			// A failed BEGIN, or "BEGIN" run as a plain statement (it has
			// a result), starts no transaction of bun's.
			if e.Err != nil || e.Result != nil {
				h.end(ctx)
			}
			return
		case "COMMIT":
			// Even a failed COMMIT may have committed: wake.
			wake(h.end(ctx))
			h.flushPending()
			return
		case "ROLLBACK":
			h.end(ctx)
			return
		}
	}
	w := h.c.watching.Load()
	if w == nil || e.Err != nil {
		return
	}
	var buf [4]tableRef
	op, refs := writeTargets(e.Query, buf[:0])
	if op == notWrite {
		return
	}
	var hit [8]*watcher
	ws := hit[:0]
	for _, ref := range refs {
		for _, wt := range w.tables[ref.name] {
			if ref.schema == "" || wt.schema == "" || ref.schema == wt.schema {
				ws = appendNew(ws, wt)
			}
		}
	}
	if len(ws) == 0 {
		return
	}
	if e.Result != nil {
		if n, err := e.Result.RowsAffected(); err == nil && n == 0 {
			return // nothing changed
		}
	}
	if self, _ := ctx.Value(workerKey{}).(*runner); self != nil {
		// A jobs worker's UPDATEs of the jobs table are the library's
		// (leases, heartbeats, retries), on jobs of its own queue.
		jobsWorker := false
		for _, wt := range ws {
			jobsWorker = jobsWorker || op == opUpdate && wt.r == self && wt.jobs
		}
		kept := ws[:0]
		for _, wt := range ws {
			if wt.r != self && !(jobsWorker && wt.jobs) {
				kept = append(kept, wt)
			}
		}
		ws = kept
	}
	if op == opInsert {
		ws = byQueueLiteral(ws, e.Query)
	}
	if len(ws) == 0 {
		return
	}
	if m, _ := ctx.Value(markKey{h}).(*txMark); m != nil && m.add(ws) {
		return // woken at commit
	}
	wake(ws)
	if h.open.Load() > 0 {
		// Perhaps in a transaction the statement's context does not
		// name: wake again after the next commit.
		h.pendingMu.Lock()
		for _, wt := range ws {
			h.pending = appendNew(h.pending, wt)
		}
		h.hasPending.Store(true)
		h.pendingMu.Unlock()
	}
}

// end ends the transaction whose mark ctx holds, and returns what it woke.
func (h *queryHook) end(ctx context.Context) []*watcher {
	m, _ := ctx.Value(markKey{h}).(*txMark)
	if m == nil {
		return nil
	}
	ws, ok := m.end()
	if ok {
		h.open.Add(-1)
	}
	return ws
}

// flushPending wakes what statements outside a known transaction woke
// since the last commit.
func (h *queryHook) flushPending() {
	if !h.hasPending.Load() {
		return
	}
	h.pendingMu.Lock()
	ws := h.pending
	h.pending = nil
	h.hasPending.Store(false)
	h.pendingMu.Unlock()
	wake(ws)
}

func wake(ws []*watcher) {
	for _, w := range ws {
		w.r.poke()
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

// writeOp is what a statement does, as far as the hook cares.
type writeOp uint8

const (
	notWrite writeOp = iota
	opInsert         // INSERT or REPLACE
	opUpdate
)

// tableRef is a table a statement names, lower-case.
type tableRef struct{ schema, name string }

// writeTargets reads the start of a MySQL statement: if it is an INSERT
// or REPLACE, it appends the table it inserts into to refs; if it is an
// UPDATE, every table named in its table references (before SET). It
// skips comments, a leading WITH clause and modifiers such as IGNORE, and
// reads quoted and schema-qualified names. It returns notWrite for any
// other statement.
func writeTargets(query string, refs []tableRef) (writeOp, []tableRef) {
	s := sqlScanner{s: query}
	k, kw := s.next()
	if k != tokWord {
		return notWrite, refs
	}
	if strings.EqualFold(kw, "WITH") {
		kw = s.afterWith()
	}
	switch {
	case strings.EqualFold(kw, "INSERT") || strings.EqualFold(kw, "REPLACE"):
		k, t := s.next()
		for k == tokWord && isAnyFold(t, "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE") {
			k, t = s.next()
		}
		if k == tokWord && strings.EqualFold(t, "INTO") {
			k, t = s.next()
		}
		if ref, ok := s.table(k, t); ok {
			refs = append(refs, ref)
		}
		return opInsert, refs
	case strings.EqualFold(kw, "UPDATE"):
		k, t := s.next()
		for k == tokWord && isAnyFold(t, "LOW_PRIORITY", "IGNORE") {
			k, t = s.next()
		}
		depth, expect := 0, true
		for ; k != tokEnd; k, t = s.next() {
			switch {
			case k == tokPunct && t == "(":
				depth++
				expect = false
			case k == tokPunct && t == ")":
				depth = max(depth-1, 0)
			case depth > 0:
			case k == tokPunct && t == ",":
				expect = true
			case k == tokWord && strings.EqualFold(t, "SET"):
				return opUpdate, refs
			case k == tokWord && isAnyFold(t, "JOIN", "STRAIGHT_JOIN"):
				expect = true
			case expect:
				expect = false
				if ref, ok := s.table(k, t); ok {
					refs = append(refs, ref)
				}
			}
		}
		return opUpdate, refs
	}
	return notWrite, refs
}

func isAnyFold(s string, words ...string) bool {
	for _, w := range words {
		if strings.EqualFold(s, w) {
			return true
		}
	}
	return false
}

type tokKind uint8

const (
	tokEnd      tokKind = iota
	tokWord             // unquoted keyword, identifier or number
	tokBacktick         // `identifier`
	tokDouble           // "identifier" (ANSI_QUOTES) or "string"
	tokString           // 'string'
	tokPunct            // any other single byte
)

// sqlScanner splits the start of a MySQL statement into tokens.
type sqlScanner struct {
	s string
	i int
}

// next returns the next token, skipping white space and comments.
func (p *sqlScanner) next() (tokKind, string) {
	p.skip()
	if p.i >= len(p.s) {
		return tokEnd, ""
	}
	start := p.i
	switch c := p.s[p.i]; {
	case c == '`' || c == '"' || c == '\'':
		p.i++
		for p.i < len(p.s) {
			switch p.s[p.i] {
			case '\\':
				if c == '\'' || c == '"' {
					p.i++ // a backslash escape in a string
				}
			case c:
				if p.i+1 < len(p.s) && p.s[p.i+1] == c {
					p.i++ // a doubled quote
				} else {
					p.i++
					return quoteKind(c), p.s[start:p.i]
				}
			}
			p.i++
		}
		return quoteKind(c), p.s[start:]
	case isWordByte(c):
		for p.i < len(p.s) && isWordByte(p.s[p.i]) {
			p.i++
		}
		return tokWord, p.s[start:p.i]
	default:
		p.i++
		return tokPunct, p.s[start:p.i]
	}
}

func quoteKind(c byte) tokKind {
	switch c {
	case '`':
		return tokBacktick
	case '"':
		return tokDouble
	}
	return tokString
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// skip skips white space and comments: /* … */ (optimizer hints and
// version comments too), "-- " and "#" to the end of the line.
func (p *sqlScanner) skip() {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			p.i++
		case c == '#' || c == '-' && strings.HasPrefix(p.s[p.i:], "--") && (p.i+2 == len(p.s) || p.s[p.i+2] <= ' '):
			if n := strings.IndexByte(p.s[p.i:], '\n'); n >= 0 {
				p.i += n + 1
			} else {
				p.i = len(p.s)
			}
		case c == '/' && strings.HasPrefix(p.s[p.i:], "/*"):
			if n := strings.Index(p.s[p.i+2:], "*/"); n >= 0 {
				p.i += n + 4
			} else {
				p.i = len(p.s)
			}
		default:
			return
		}
	}
}

// afterWith skips a WITH clause and returns the keyword of the statement
// it belongs to.
func (p *sqlScanner) afterWith() string {
	depth := 0
	for {
		k, t := p.next()
		switch {
		case k == tokEnd:
			return ""
		case k == tokPunct && t == "(":
			depth++
		case k == tokPunct && t == ")":
			depth = max(depth-1, 0)
		case depth == 0 && k == tokWord && isAnyFold(t, "SELECT", "INSERT", "REPLACE", "UPDATE", "DELETE"):
			return t
		}
	}
}

// table reads a table name that starts with the token k, t, and a schema
// before it if there is one.
func (p *sqlScanner) table(k tokKind, t string) (tableRef, bool) {
	name, ok := identifier(k, t)
	if !ok {
		return tableRef{}, false
	}
	save := p.i
	if k, t := p.next(); k == tokPunct && t == "." {
		k, t := p.next()
		table, ok := identifier(k, t)
		if !ok {
			return tableRef{}, false
		}
		return tableRef{schema: name, name: table}, true
	}
	p.i = save
	return tableRef{name: name}, true
}

// identifier returns the lower-case name a token names, if it names one.
func identifier(k tokKind, t string) (string, bool) {
	switch k {
	case tokWord:
		return strings.ToLower(t), true
	case tokBacktick, tokDouble:
		if len(t) < 2 || t[len(t)-1] != t[0] {
			return "", false
		}
		q := t[:1]
		t = t[1 : len(t)-1]
		if strings.Contains(t, q+q) {
			t = strings.ReplaceAll(t, q+q, q)
		}
		return strings.ToLower(t), true
	}
	return "", false
}
