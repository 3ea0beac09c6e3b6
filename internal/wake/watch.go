package wake

import (
	"context"
	"slices"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
)

// Watch is what the query hook needs of a started client: which queues
// watch which table. Its zero value watches nothing; fill it with Add
// before the hook reads it, and change it no more.
type Watch struct {
	tables map[string][]*Target // by lower-case table name
}

// Target is one queue watching one table: the hook wakes it with
// Queue.Poke.
type Target struct {
	// Queue is the queue's engine: the hook pokes it, and knows its
	// workers' own writes by it (engine.WorkerOf).
	Queue *engine.Queue
	// Table is the name of the table, without its schema.
	Table string
	// Schema is the table's schema, "" for the connection's database.
	Schema string
	// Jobs is set for a jobs queue, whose Table is the jobs table.
	Jobs bool
	// Literal is the jobs queue's name as an SQL string literal, if known.
	Literal string
}

// Add adds t to w. Its Table and Schema are matched case-insensitively.
// The targets of a table are woken in the order they were added.
func (w *Watch) Add(t Target) {
	if w.tables == nil {
		w.tables = map[string][]*Target{}
	}
	t.Schema = strings.ToLower(t.Schema)
	name := strings.ToLower(t.Table)
	w.tables[name] = append(w.tables[name], &t)
}

// woken appends to ts the targets that the statement of e, run with
// ctx, wakes: those of the tables it wrote, if it changed rows, but not
// the queue of the worker that ran it (see notOwn) and, for an INSERT
// into the jobs table, only the jobs queues it names (see
// byQueueLiteral), nor the queue of the feed that ctx holds under the
// key handOver: the statement's job is handed to that feed.
func (w *Watch) woken(ctx context.Context, e *bun.QueryEvent, handOver any, ts []*Target) []*Target {
	var buf [4]Table
	op, refs := Targets(e.Query, buf[:0])
	if op == NotWrite {
		return nil
	}
	ts = w.of(refs, ts)
	if len(ts) == 0 || unchanged(e) {
		return nil
	}
	if self := engine.WorkerOf(ctx); self != nil {
		ts = notOwn(ts, self, op)
	}
	if op == Insert {
		ts = byQueueLiteral(ts, e.Query)
		if f, _ := ctx.Value(handOver).(*engine.Feed); f != nil {
			ts = slices.DeleteFunc(ts, func(t *Target) bool { return t.Queue == f.Queue() }) // handed over: see the root's handover.go
		}
	}
	return ts
}

// of appends to ts the targets of the tables of refs. A name without a
// schema matches the table in any schema.
func (w *Watch) of(refs []Table, ts []*Target) []*Target {
	for _, ref := range refs {
		for _, t := range w.tables[ref.Name] {
			if ref.Schema == "" || t.Schema == "" || ref.Schema == t.Schema {
				ts = appendNew(ts, t)
			}
		}
	}
	return ts
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

// notOwn leaves out of ts, the targets woken by a write made with the
// context of a worker of self, self's own queue: the worker claims again
// as soon as its batch ends. A jobs worker's UPDATEs of the jobs table
// are the library's (leases, heartbeats, retries), on jobs of its own
// queue: they wake no jobs queue.
func notOwn(ts []*Target, self *engine.Queue, op Op) []*Target {
	jobsWorker := false
	for _, t := range ts {
		jobsWorker = jobsWorker || op == Update && t.Queue == self && t.Jobs
	}
	kept := ts[:0]
	for _, t := range ts {
		if t.Queue != self && !(jobsWorker && t.Jobs) {
			kept = append(kept, t)
		}
	}
	return kept
}

// byQueueLiteral keeps, of the targets of an INSERT, those of the jobs
// queues named in it as string literals, if it names any.
func byQueueLiteral(ts []*Target, query string) []*Target {
	named := false
	for _, t := range ts {
		if t.Literal != "" && strings.Contains(query, t.Literal) {
			named = true
			break
		}
	}
	if !named {
		return ts
	}
	kept := ts[:0]
	for _, t := range ts {
		if t.Literal == "" || strings.Contains(query, t.Literal) { // "": not a jobs queue, or its name is unknown
			kept = append(kept, t)
		}
	}
	return kept
}

// wakeAll wakes the queues of ts.
func wakeAll(ts []*Target) {
	for _, t := range ts {
		t.Queue.Poke()
	}
}

// appendNew appends t to ts unless ts holds it.
func appendNew(ts []*Target, t *Target) []*Target {
	for _, x := range ts {
		if x == t {
			return ts
		}
	}
	return append(ts, t)
}
