package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// The engine builds every statement of a queue from the queue's query: it
// adds the keys it reads or claims, a LIMIT, its lock clause, its index
// hints and the columns it needs, and it takes each row the query returns
// for a row of the model's table, which a claim locks. Client.Add refuses
// a query that sets any of these or that returns something else
// (checkShape), since the engine would replace the clause or run it
// wrong; Start runs each queue's claim once (checkQuery), so that a query
// the server refuses fails Start instead of every poll.

// apply adds the queue's query to sel, its WHERE conditions as one group:
// the conditions the engine adds after it (the keys it claims, the rows it
// cools down) then bind to all of them, even where the query's own are
// joined by OR (WhereOr), which binds looser than AND.
func (q *Queue[T]) apply(sel *bun.SelectQuery) *bun.SelectQuery {
	return sel.WhereGroup(" AND ", q.query)
}

// Markers that checkShape adds to the query after the queue's function,
// so as to find, in the query's SQL, what the function set before each.
// bun appends them to the lists the function may have filled (columns,
// tables, joins, GROUP BY, HAVING, ORDER BY): what the SQL has in
// front of or after each marker tells whether the function set that
// clause.
const (
	markColumn = "bunqueue_shape_column"
	markTable  = "bunqueue_shape_table"
	markJoin   = "bunqueue_shape_join"
	markGroup  = "bunqueue_shape_group"
	markHaving = "bunqueue_shape_having"
	markOrder  = "bunqueue_shape_order"
)

// A clause is one the engine cannot run in a queue's query: its name in
// SQL and bun, and why.
type clause struct{ name, why string }

var (
	clauseLimit  = clause{"LIMIT (SelectQuery.Limit)", "the engine sets the LIMIT of every statement it builds from the query (a read's window, a batch's size)"}
	clauseOffset = clause{"OFFSET (SelectQuery.Offset)", "the rows it skips would never be processed"}
	clauseFor    = clause{"FOR (SelectQuery.For)", "the engine locks the rows it claims itself (FOR UPDATE SKIP LOCKED); a lock clause would make its plain reads lock rows and wait for the workers"}
	clauseUnion  = clause{"UNION, INTERSECT or EXCEPT", "the engine adds its conditions (the keys it claims, the rows it cools down) to the first SELECT only"}
	clauseGroup  = clause{"GROUP BY (SelectQuery.Group, GroupExpr)", "a queue's items are rows of its model's table, which a claim locks, not groups"}
	clauseHaving = clause{"HAVING (SelectQuery.Having)", "a queue's items are rows of its model's table, which a claim locks, not groups; put the condition in Where"}
	clauseDist   = clause{"DISTINCT (SelectQuery.Distinct, DistinctOn)", "a queue's items are rows of its model's table, distinct already; a claim cannot lock the rows of a DISTINCT (PostgreSQL refuses it)"}
	clauseColumn = clause{"a column list (SelectQuery.Column, ColumnExpr, ExcludeColumn)", "the engine chooses the columns: the primary key for its reads, the whole model for a claim"}
	clauseTable  = clause{"another table (SelectQuery.Table, TableExpr, ModelTableExpr)", "the queue's table is its model's: Start checks it, the wake-up hook watches it and the engine's statements read it with their own index hints"}
	clauseHint   = clause{"index hints (SelectQuery.UseIndex, ForceIndex, IgnoreIndex)", "the engine chooses the index of each statement (a claim by key reads the primary key)"}
	clauseJoin   = clause{"JOIN (SelectQuery.Join, Relation)", "a claim would lock the joined rows too, and a join that matches several rows hands one row out several times; " +
		`test the other table in Where, with "EXISTS (SELECT 1 FROM … WHERE …)"`}
)

// checkShape applies the queue's query function to a select over the model
// and returns an error naming the queue and each clause it set that the
// engine cannot run (see clause), or what else keeps it from being a
// queue's query. db renders the SQL as the server's dialect writes it.
func (q *Queue[T]) checkShape(db *bun.DB) (err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("bunqueue: queue %q: "+format, append([]any{q.name}, args...)...)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fail("the query function panicked: %v", r)
		}
	}()
	model := new([]T)
	given := db.NewSelect().Model(model)
	sel := q.apply(given)
	switch {
	case sel != given:
		return fail("the query function must add to the query it is given and return it, not another query")
	case sel.GetModel() == nil || sel.GetModel().Value() != any(model):
		return fail("the query function must not change the query's model (SelectQuery.Model): a queue reads and claims rows of its own model")
	}
	got, err := markedSQL(db, sel)
	if err != nil {
		return fail("its query: %w", err)
	}
	want, err := markedSQL(db, db.NewSelect().Model(new([]T)))
	if err != nil {
		return fail("its query: %w", err)
	}
	found := tailClauses(got)
	found = append(found, groupClauses(got)...)
	found = append(found, headClauses(got, want)...)
	if len(found) == 0 {
		return nil
	}
	parts := make([]string, len(found))
	for i, c := range found {
		parts[i] = c.name + ": " + c.why
	}
	return fail("its query must not set %s", strings.Join(parts, "; nor "))
}

// markedSQL returns the SQL of sel with the markers added after what the
// query function set (see markColumn), as db's dialect writes it.
func markedSQL(db *bun.DB, sel *bun.SelectQuery) (string, error) {
	b, err := sel.ColumnExpr(markColumn).TableExpr(markTable).Join(markJoin).
		GroupExpr(markGroup).Having(markHaving).OrderExpr(markOrder).Comment("").
		AppendQuery(db.QueryGen(), nil)
	return string(b), err
}

// tailClauses returns the clauses that got, the query's marked SQL, has
// after the marker of ORDER BY, which is last in its list: LIMIT, OFFSET,
// FOR and set operations.
func tailClauses(got string) []clause {
	var found []clause
	_, tail, _ := strings.Cut(got, markOrder)
	for _, c := range []struct {
		prefix string
		clause clause
	}{{" LIMIT ", clauseLimit}, {" OFFSET ", clauseOffset}, {" FOR ", clauseFor}} {
		if rest, ok := strings.CutPrefix(tail, c.prefix); ok {
			found = append(found, c.clause)
			tail = strings.TrimLeft(rest, "0123456789")
			if c.clause == clauseFor {
				tail = "" // the lock's own words
			}
		}
	}
	if tail != "" {
		found = append(found, clauseUnion)
	}
	return found
}

// groupClauses returns GROUP BY and HAVING if got, the query's marked
// SQL, has them: right before their markers stands the keyword alone,
// unless the query has its own.
func groupClauses(got string) []clause {
	var found []clause
	if !strings.Contains(got, " GROUP BY "+markGroup) {
		found = append(found, clauseGroup)
	}
	if !strings.Contains(got, " HAVING ("+markHaving+")") {
		found = append(found, clauseHaving)
	}
	return found
}

// headClauses returns the clauses from SELECT to WHERE that got, the
// query's marked SQL, has and want, the model's alone, has not: DISTINCT,
// columns, tables, index hints, joins. A WITH in front is fine: the
// query's conditions may read its tables.
func headClauses(got, want string) []clause {
	var found []clause
	i := strings.Index(got, markColumn)
	before := got[:i]
	if s := strings.LastIndex(before, "SELECT "); s >= 0 && strings.HasPrefix(before[s:], "SELECT DISTINCT ") {
		found = append(found, clauseDist)
	}
	if strings.HasSuffix(before, ", ") { // bun puts the query's own columns before the marker
		found = append(found, clauseColumn)
	}
	from := want[strings.Index(want, markColumn)+len(markColumn):]
	tables := from[:strings.Index(from, markTable)+len(markTable)] // " FROM `t` AS `t`, marker"
	rest := got[i+len(markColumn):]
	rest = rest[max(strings.Index(rest, " FROM "), 0):] // past the columns of joined relations, if any
	after, ok := strings.CutPrefix(rest, tables)
	switch {
	case !ok:
		return append(found, clauseTable)
	case strings.HasPrefix(after, " "+markJoin+" "):
		return found
	}
	for _, hint := range []string{" USE INDEX", " FORCE INDEX", " IGNORE INDEX"} {
		if strings.HasPrefix(after, hint) {
			return append(found, clauseHint)
		}
	}
	return append(found, clauseJoin)
}

// checkQuery runs the queue's claim at the head of the queue once, with a
// condition that no row meets: the server checks the statement (its
// columns, its functions, the lock clause with the query) without
// reading or locking a row. An error is the server's refusal.
func (q *Queue[T]) checkQuery(ctx context.Context) error {
	var items []T
	sel := q.apply(q.atHead(q.client.db.NewSelect().Model(&items))).Where("1 = 0").Limit(1)
	err := sqldialect.Locking(sel, q.client.dialect.SkipLocked()).Scan(ctx)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return nil
}
