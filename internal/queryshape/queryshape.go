// Package queryshape finds the clauses of a queue's query that the
// engine cannot run: the engine builds every statement of a queue from
// its query, adding the keys it reads or claims, a LIMIT, its lock
// clause, its index hints and the columns it needs, and it takes each
// row the query returns for a row of the model's table, which a claim
// locks. It renders the query with bun and reads its SQL; it runs
// nothing.
package queryshape

import (
	"strings"

	"github.com/uptrace/bun"
)

// Find returns what sel, a select over a queue's model with the queue's
// query added, sets that the engine cannot run, as text ("X: why; nor
// Y: why"), or "" if nothing; bare is a select over the model alone. db
// renders the SQL as the server's dialect writes it.
func Find(db *bun.DB, sel, bare *bun.SelectQuery) (string, error) {
	got, err := markedSQL(db, sel)
	if err != nil {
		return "", err
	}
	want, err := markedSQL(db, bare)
	if err != nil {
		return "", err
	}
	found := tailClauses(got)
	found = append(found, groupClauses(got)...)
	found = append(found, headClauses(got, want)...)
	parts := make([]string, len(found))
	for i, c := range found {
		parts[i] = c.Name + ": " + c.Why
	}
	return strings.Join(parts, "; nor "), nil
}

// Markers that Find adds to the query after the queue's function,
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

// A Clause is one the engine cannot run in a queue's query: its name in
// SQL and bun, and why.
type Clause struct{ Name, Why string }

var (
	clauseLimit  = Clause{"LIMIT (SelectQuery.Limit)", "the engine sets the LIMIT of every statement it builds from the query (a read's window, a batch's size)"}
	clauseOffset = Clause{"OFFSET (SelectQuery.Offset)", "the rows it skips would never be processed"}
	clauseFor    = Clause{"FOR (SelectQuery.For)", "the engine locks the rows it claims itself (FOR UPDATE SKIP LOCKED); a lock clause would make its plain reads lock rows and wait for the workers"}
	clauseUnion  = Clause{"UNION, INTERSECT or EXCEPT", "the engine adds its conditions (the keys it claims, the rows it cools down) to the first SELECT only"}
	clauseGroup  = Clause{"GROUP BY (SelectQuery.Group, GroupExpr)", "a queue's items are rows of its model's table, which a claim locks, not groups"}
	clauseHaving = Clause{"HAVING (SelectQuery.Having)", "a queue's items are rows of its model's table, which a claim locks, not groups; put the condition in Where"}
	clauseDist   = Clause{"DISTINCT (SelectQuery.Distinct, DistinctOn)", "a queue's items are rows of its model's table, distinct already; a claim cannot lock the rows of a DISTINCT (PostgreSQL refuses it)"}
	clauseColumn = Clause{"a column list (SelectQuery.Column, ColumnExpr, ExcludeColumn)", "the engine chooses the columns: the primary key for its reads, the whole model for a claim"}
	clauseTable  = Clause{"another table (SelectQuery.Table, TableExpr, ModelTableExpr)", "the queue's table is its model's: Start checks it, the wake-up hook watches it and the engine's statements read it with their own index hints"}
	clauseHint   = Clause{"index hints (SelectQuery.UseIndex, ForceIndex, IgnoreIndex)", "the engine chooses the index of each statement (a claim by key reads the primary key)"}
	clauseJoin   = Clause{"JOIN (SelectQuery.Join, Relation)", "a claim would lock the joined rows too, and a join that matches several rows hands one row out several times; " +
		`test the other table in Where, with "EXISTS (SELECT 1 FROM … WHERE …)"`}
)

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
func tailClauses(got string) []Clause {
	var found []Clause
	_, tail, _ := strings.Cut(got, markOrder)
	for _, c := range []struct {
		prefix string
		clause Clause
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
func groupClauses(got string) []Clause {
	var found []Clause
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
func headClauses(got, want string) []Clause {
	var found []Clause
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
