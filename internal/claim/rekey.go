package claim

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/sqltoken"
	"github.com/bunqueue/bunqueue/internal/wake"
)

// A handler that changes its row's primary key in SQL but not in its
// model breaks the rule in a way the re-check cannot see by itself: it
// looks the row up by the key it was claimed with, finds nothing, and
// takes the row for gone, while the row may still match the query under
// its new key and be claimed, and re-keyed, for ever. So the claim
// transactions are begun on a copy of the client's DB with RekeyHook,
// which watches the statements that a handler runs through its tx with
// its context: an UPDATE of the queue's table that assigns a column of
// its primary key is noted, and a row whose key then vanished is treated
// as one that did not leave (keyChangedError): its writes are undone and
// it cools down under its key. A handler that sets the model's key too is
// re-checked under both keys instead (Queue.stillQueued).

// rekeyTarget is what RekeyHook looks for in a queue's statements.
type rekeyTarget struct {
	table string   // the queue's table, lower-case
	pks   []string // its primary key's columns, lower-case
}

// newRekeyTarget returns the target of the queue over table.
func newRekeyTarget(table *schema.Table) *rekeyTarget {
	t := &rekeyTarget{table: strings.ToLower(table.Name), pks: make([]string, len(table.PKs))}
	for i, f := range table.PKs {
		t.pks[i] = strings.ToLower(f.Name)
	}
	return t
}

// rekeyWatch is what RekeyHook watches for, for one handler call.
type rekeyWatch struct {
	*rekeyTarget
	seen atomic.Pointer[string]
}

// rekeyKey is the context key of a handler call's rekeyWatch.
type rekeyKey struct{}

// watchRekey returns ctx with a new rekeyWatch of the queue's table, for
// one handler call; nil and ctx for a queue that is not re-checked.
func (q *Queue[T]) watchRekey(ctx context.Context) (context.Context, *rekeyWatch) {
	if q.Trusted || q.rekey == nil {
		return ctx, nil
	}
	w := &rekeyWatch{rekeyTarget: q.rekey}
	return context.WithValue(ctx, rekeyKey{}, w), w
}

// changed returns the column of the key that a statement of the watched
// call assigned, or "" if none did.
func (w *rekeyWatch) changed() string {
	if w == nil {
		return ""
	}
	if col := w.seen.Load(); col != nil {
		return *col
	}
	return ""
}

// RekeyHook is the query hook of the claim transactions' DB.
type RekeyHook struct{}

// BeforeQuery implements bun.QueryHook.
func (RekeyHook) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

// AfterQuery implements bun.QueryHook: it notes a successful UPDATE that
// assigns a key column of the watched table.
func (RekeyHook) AfterQuery(ctx context.Context, e *bun.QueryEvent) {
	w, _ := ctx.Value(rekeyKey{}).(*rekeyWatch)
	if w == nil || e.Err != nil || w.seen.Load() != nil {
		return
	}
	if col := assignedKey(e.Query, w.table, w.pks); col != "" {
		w.seen.Store(&col)
	}
}

// assignedKey returns the first of the columns pks that query, if it is
// an UPDATE naming table (lower-case) among its tables, assigns in its
// SET clause; "" if it assigns none. A qualified column (alias.col)
// counts by its last part.
func assignedKey(query, table string, pks []string) string {
	s := sqltoken.NewScanner(query, sqltoken.MySQL)
	kw := s.Next()
	if kw.IsWord("WITH") {
		kw = wake.AfterWith(&s)
	}
	if !kw.IsWord("UPDATE") {
		return ""
	}
	refs, set := wake.UpdateTables(&s, nil)
	if !set || !namesTable(refs, table) {
		return ""
	}
	depth, expect := 0, true
	for t := s.Next(); t.Kind != sqltoken.End; t = s.Next() {
		switch {
		case t.Is("("):
			depth++
		case t.Is(")"):
			depth = max(depth-1, 0)
		case depth > 0:
		case t.Is(","):
			expect = true
		case wake.IsAnyWord(t, "WHERE", "ORDER", "LIMIT", "FROM", "RETURNING"):
			return ""
		case expect:
			expect = false
			col, ok := wake.Identifier(t)
			for ok && s.Peek().Is(".") {
				s.Next()
				col, ok = wake.Identifier(s.Next())
			}
			for _, pk := range pks {
				if ok && col == pk {
					return pk
				}
			}
		}
	}
	return ""
}

// namesTable reports whether refs name table, in any schema.
func namesTable(refs []wake.Table, table string) bool {
	for _, r := range refs {
		if r.Name == table {
			return true
		}
	}
	return false
}

// keyChangedError is the error of a row whose handler returned nil after
// an UPDATE that assigned col, a column of its key, while the model kept
// the key the row was claimed with, under which the row is gone.
func (q *Queue[T]) keyChangedError(col string) error {
	return fmt.Errorf("%w (the handler changed the row's key in SQL, by an UPDATE that sets %s, but not in its model, "+
		"so the re-check cannot find the row under its new key: set the model's key too)", q.Env.StillQueued, col)
}
