package bunqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// A worker's claim of one row by its key, the re-check that the row left
// its queue, and a lone lock-mode job's DELETE run as statements prepared
// on the server, with the key as their argument: the same text every
// time, which the server parses and plans once per connection instead of
// once per row. bun formats its queries on the client, so the claim and
// the re-check are built by bun with parameter markers where the key
// goes, and run through database/sql; their text is the cache's key, so a
// queue whose query changes with every call (one that embeds the time,
// say) is never prepared. bun's query hooks do not see them: bunqueue
// starts their CLIENT spans itself.

// preparable reports whether the queue's claims of one row may be
// prepared: its model has no hooks that bun would run around a SELECT
// and no relations (a prepared claim is scanned by bun.DB.ScanRows, which
// knows neither), and its key values pass through database/sql as they are.
func preparable(typ reflect.Type, table *schema.Table) bool {
	ptr := reflect.PointerTo(typ)
	for _, hook := range []reflect.Type{
		reflect.TypeFor[bun.BeforeSelectHook](),
		reflect.TypeFor[bun.AfterSelectHook](),
		reflect.TypeFor[schema.BeforeAppendModelHook](),
	} {
		if typ.Implements(hook) || ptr.Implements(hook) {
			return false
		}
	}
	if len(table.Relations) > 0 {
		return false
	}
	valuer := reflect.TypeFor[driver.Valuer]()
	for _, f := range table.PKs {
		t := f.StructField.Type
		if t.Implements(valuer) {
			continue
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.String:
		default:
			return false // uint64 (database/sql refuses the high bit), time, bytes, structs
		}
	}
	return true
}

// markers is the key of a prepared statement's row: the dialect's
// parameter markers in place of its values, for onlyKeys.
func (q *Queue[T]) markers() []feedKey {
	marks := make([]any, len(q.table.PKs))
	for i := range marks {
		marks[i] = bun.Safe(q.client.dialect.Placeholder(i + 1))
	}
	return []feedKey{{vals: marks}}
}

// claimOne claims the row of key k, if it still waits and is not locked,
// with a prepared statement. ok is false when the statement is not
// prepared yet: nothing ran, and the row is claimed in text.
func (q *Queue[T]) claimOne(ctx context.Context, tx bun.Tx, k feedKey) (items []T, ok bool, err error) {
	items = make([]T, 0, 1)
	sel := q.onlyKeys(q.apply(q.byKey(q.newClaim(tx, &items))), q.markers()).Limit(1)
	ok, err = q.scanPrepared(ctx, tx, sqldialect.Locking(sel, q.client.dialect.SkipLocked()), k.vals, &items)
	return items, ok, err
}

// recheckOne reports, with a prepared statement, whether the row of the
// key vals still matches the queue's query. ok is false when the
// statement is not prepared yet: nothing ran, and the re-check runs in
// text.
func (q *Queue[T]) recheckOne(ctx context.Context, tx bun.Tx, vals []any) (still, ok bool, err error) {
	found := make([]T, 0, 1)
	sel := q.onlyKeys(q.apply(q.byKey(tx.NewSelect().Model(&found))).Column(q.pkNames()...), q.markers()).Limit(1)
	ok, err = q.scanPrepared(ctx, tx, sel, vals, &found)
	return len(found) > 0, ok, err
}

// scanPrepared runs sel, whose key values are parameter markers for args,
// in tx as a statement prepared on the server, and scans its rows into
// dest. ok is false when the statement is not prepared (yet): nothing ran.
func (q *Queue[T]) scanPrepared(ctx context.Context, tx bun.Tx, sel *bun.SelectQuery, args []any, dest any) (ok bool, err error) {
	b, err := sel.AppendQuery(q.client.db.QueryGen(), nil)
	if err != nil {
		return false, nil // bun reports it again in text
	}
	return q.client.prepared(ctx, tx, "SELECT", q.table.Name, string(b), func(ctx context.Context, st *sql.Stmt) error {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		return q.client.db.ScanRows(ctx, rows, dest) // closes rows
	})
}

// prepared runs fn, in tx, with the statement prepared for text, in a
// CLIENT span named for op (SELECT, DELETE) and table. ok is false when
// text is not prepared (yet): nothing ran, and the caller runs it in text.
// A statement the server refused (Dialect.Refused: not a conflict, a kill
// or a lost connection) is dropped, and its text runs as it is for a
// while; one the server session did not have (Dialect.StatementLost)
// turns every prepared statement off, and fails with errPreparedLost, so
// that its transaction runs again at once, in text.
func (c *Client) prepared(ctx context.Context, tx bun.Tx, op, table, text string, fn func(ctx context.Context, st *sql.Stmt) error) (ok bool, err error) {
	stmt := c.stmts.Get(text)
	if stmt == nil {
		return false, nil
	}
	ctx, span := c.tel.startStatement(ctx, c.dialect.System(), op, table, text)
	ts := tx.Tx.StmtContext(ctx, stmt)
	err = fn(ctx, ts)
	_ = ts.Close()
	c.tel.endSpan(span, err)
	if err == nil {
		return true, nil
	}
	if c.dialect.StatementLost(err) && ctx.Err() == nil {
		c.preparedOff(ctx, "a prepared statement was missing on the server session, or there already", err)
		return true, fmt.Errorf("%w: %w", errPreparedLost, err)
	}
	if c.dialect.Refused(err) && ctx.Err() == nil {
		c.stmts.Drop(text)
	}
	return true, fmt.Errorf("%w (prepared statement)", err)
}
