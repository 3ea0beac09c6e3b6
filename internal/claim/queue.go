package claim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/uptrace/bun"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/uptrace/bun/schema"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// PKNames returns the names of the model's primary key columns.
func (q *Queue[T]) PKNames() []string {
	names := make([]string, len(q.Table.PKs))
	for i, f := range q.Table.PKs {
		names[i] = f.Name
	}
	return names
}

// Key returns the row's primary key values and a readable id for them.
func (q *Queue[T]) Key(item *T) ([]any, string) {
	v := reflect.ValueOf(item).Elem()
	vals := make([]any, len(q.Table.PKs))
	var b strings.Builder
	for i, f := range q.Table.PKs {
		vals[i] = f.Value(v).Interface()
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%v", f.Name, vals[i])
	}
	return vals, b.String()
}

// excludeCooling keeps rows this process is cooling down out of a claim.
func (q *Queue[T]) excludeCooling(sel *bun.SelectQuery, now time.Time) *bun.SelectQuery {
	keys := q.Cool.Active(now)
	if len(keys) == 0 {
		return sel
	}
	cs := make([]engine.Key, len(keys))
	for i, k := range keys {
		cs[i].Vals = k
	}
	return q.exceptKeys(sel, cs)
}

// startItemSpan starts the span of one claimed item.
func (q *Queue[T]) startItemSpan(ctx context.Context, batch trace.Span, item *T, n int) *telemetry.Item {
	vals, id := q.Key(item)
	if len(vals) == 1 {
		id = fmt.Sprint(vals[0]) // messaging.message.id: the bare key
	}
	creator := context.Background()
	if q.Creator != nil {
		creator = q.Creator(item)
	}
	var attrs []attribute.KeyValue
	if q.Attrs != nil {
		attrs = q.Attrs(item)
	}
	return q.Env.Tel.StartItem(ctx, batch, q.Name, n, id, creator, attrs...)
}

// failureOutcome is the outcome of an item whose failure OnError recorded.
func (q *Queue[T]) failureOutcome(item *T, cause error) string {
	if q.Outcome != nil {
		return q.Outcome(item, cause)
	}
	return telemetry.OutcomeFailed
}

// batchInfo describes a batch to the lifecycle hooks.
func (q *Queue[T]) batchInfo(items []T) Info {
	keys := make([]string, len(items))
	for i := range items {
		_, keys[i] = q.Key(&items[i])
	}
	return Info{Keys: keys}
}

// workInfo describes an item to the lifecycle hooks.
func (q *Queue[T]) workInfo(item *T) Info {
	_, id := q.Key(item)
	return Info{Key: id}
}

// Fetch reads on db, with a plain read that locks nothing, the keys
// of up to limit rows that match the queue's query, in its order, leaving out
// the rows this process is cooling down.
func (q *Queue[T]) Fetch(ctx context.Context, db bun.IDB, limit int) ([]engine.Key, error) {
	rows := make([]T, 0, limit)
	cols := q.PKNames()
	if q.KeyLimit != nil && !slices.Contains(cols, q.KeyLimit.Column) {
		cols = append(cols, q.KeyLimit.Column) // for the feed to keep a key's rows apart
	}
	sel := q.waiting(db, &rows).Comment(engine.ReadComment(q.Name)).Column(cols...).Limit(int64(limit))
	if err := sel.Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("bunqueue: queue %q: read waiting rows: %w", q.Name, err)
	}
	keys := make([]engine.Key, len(rows))
	for i := range rows {
		keys[i].Vals, keys[i].ID = q.Key(&rows[i])
		if q.KeyLimit != nil {
			if key, _, limited := q.KeyOf(&rows[i]); limited {
				keys[i].LimitKey = key
			}
		}
	}
	return keys, nil
}

// selectFrom returns a SELECT on db over model, a *T or a *[]T, from the
// queue's table.
func (q *Queue[T]) selectFrom(db bun.IDB, model any) *bun.SelectQuery {
	sel := db.NewSelect().Model(model)
	if q.From != "" {
		sel = sel.ModelTableExpr(q.From + " AS ?TableAlias")
	}
	return sel
}

// tableName is the queue's table as its statements write it.
func (q *Queue[T]) tableName() string {
	if q.From != "" {
		return q.From
	}
	return "?TableName"
}

// waiting returns the queue's read of its waiting rows into model on db,
// without the rows this process is cooling down: the feed's read, and the
// idle watcher's probe, at the head of the queue's index.
func (q *Queue[T]) waiting(db bun.IDB, model any) *bun.SelectQuery {
	now := time.Now()
	return q.excludeFull(q.excludeCooling(q.Apply(q.atHead(q.selectFrom(db, model))), now), now)
}

// onlyKeys restricts a claim to the rows of keys.
func (q *Queue[T]) onlyKeys(sel *bun.SelectQuery, keys []engine.Key) *bun.SelectQuery {
	return q.whereKeys(sel, "IN", keys)
}

// exceptKeys leaves the rows of keys out of a claim.
func (q *Queue[T]) exceptKeys(sel *bun.SelectQuery, keys []engine.Key) *bun.SelectQuery {
	return q.whereKeys(sel, "NOT IN", keys)
}

func (q *Queue[T]) whereKeys(sel *bun.SelectQuery, op string, keys []engine.Key) *bun.SelectQuery {
	if len(q.Table.PKs) == 1 {
		flat := make([]any, len(keys))
		for i, k := range keys {
			flat[i] = k.Vals[0]
		}
		return sel.Where("?TableAlias.? "+op+" (?)", bun.Ident(q.Table.PKs[0].Name), bun.List(flat))
	}
	tuples := make([]bun.TupleValues, len(keys))
	for i, k := range keys {
		tuples[i] = bun.Tuple(k.Vals)
	}
	return sel.Where("(?TablePKs) "+op+" (?)", bun.List(tuples))
}

// Depth implements engine.Work: it counts the rows waiting in the queue
// and not locked, at most limit (see CountUnlocked).
func (q *Queue[T]) Depth(ctx context.Context, limit int) (int, error) {
	return CountUnlocked(ctx, q.Env.DB, q.Env.Dialect, q.Name, limit, func(tx bun.Tx) *bun.SelectQuery {
		return q.Apply(q.selectFrom(tx, (*T)(nil))).Column(q.PKNames()...)
	})
}

// CountUnlocked counts the rows of sel, at most limit, skipping the
// locked ones, in a READ COMMITTED transaction on db that it rolls back.
func CountUnlocked(ctx context.Context, db *bun.DB, d sqldialect.Dialect, queue string, limit int, sel func(tx bun.Tx) *bun.SelectQuery) (int, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := sqldialect.Locking(sel(tx).Limit(int64(limit)), d.SkipLocked()).Rows(ctx)
	if err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	return n, nil
}

// Probe returns the queue's read of its waiting rows on db as a
// scalar subquery for the idle watcher's probe: 1 if it finds a row that
// is neither cooling down nor one of except, NULL if not.
func (q *Queue[T]) Probe(db bun.IDB, except []engine.Key) *bun.SelectQuery {
	sel := q.waiting(db, (*T)(nil)).ColumnExpr("1").Limit(1)
	if len(except) > 0 {
		sel = q.exceptKeys(sel, except)
	}
	return sel
}

// Explain returns the queue's plain read of its waiting rows' keys (as
// Fetch sends it, without its LIMIT), and the queue's table.
func (q *Queue[T]) Explain() (*bun.SelectQuery, *schema.Table) {
	return q.Apply(q.atHead(q.selectFrom(q.Env.DB, (*T)(nil)))).Column(q.PKNames()...), q.Table
}

// Apply adds the queue's query to sel, its WHERE conditions as one group:
// the conditions the engine adds after it (the keys it claims, the rows it
// cools down) then bind to all of them, even where the query's own are
// joined by OR (WhereOr), which binds looser than AND.
func (q *Queue[T]) Apply(sel *bun.SelectQuery) *bun.SelectQuery {
	return sel.WhereGroup(" AND ", q.Query)
}

// CheckQuery runs the queue's claim at the head of the queue once, with a
// condition that no row meets: the server checks the statement (its
// columns, its functions, the lock clause with the query) without
// reading or locking a row. An error is the server's refusal.
func (q *Queue[T]) CheckQuery(ctx context.Context) error {
	var items []T
	sel := q.Apply(q.atHead(q.selectFrom(q.Env.DB, &items))).Where("1 = 0").Limit(1)
	err := sqldialect.Locking(sel, q.Env.Dialect.SkipLocked()).Scan(ctx)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return nil
}
