package sqldialect

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
)

// Explain implements Dialect with EXPLAIN QUERY PLAN: each row of it is
// a step, its detail in Extra ("SEARCH t USING INDEX t_status (status=?)"),
// the table (or alias) it reads in Table, its first word (SCAN, SEARCH,
// USE…) in Type and the index it reads in Key. Problems reads them with
// slProblems.
func (SQLite) Explain(ctx context.Context, db bun.IDB, query string) (Plan, error) {
	rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query)
	if err != nil {
		return Plan{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return Plan{}, err
	}
	if len(cols) == 0 || !strings.EqualFold(cols[len(cols)-1], "detail") {
		return Plan{}, fmt.Errorf("EXPLAIN QUERY PLAN returned the columns %v, not id, parent, notused, detail", cols)
	}
	var p Plan
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return Plan{}, err
		}
		p.Steps = append(p.Steps, slStep(vals[len(vals)-1].String))
	}
	return p, rows.Err()
}

// slStep reads one detail of EXPLAIN QUERY PLAN: "SCAN t", "SCAN t USING
// [COVERING] INDEX i", "SEARCH t USING [COVERING] INDEX i (a=?)", "SEARCH
// t USING INTEGER PRIMARY KEY (rowid=?)", "USE TEMP B-TREE FOR ORDER
// BY"… (SQLite before 3.36 wrote "SCAN TABLE t").
func slStep(detail string) PlanStep {
	s := PlanStep{Extra: detail, sl: true}
	words := strings.Fields(detail)
	if len(words) == 0 {
		return s
	}
	s.Type = words[0]
	if s.Type != "SCAN" && s.Type != "SEARCH" || len(words) < 2 {
		return s
	}
	rest := words[1:]
	if rest[0] == "TABLE" && len(rest) > 1 {
		rest = rest[1:]
	}
	s.Table = rest[0]
	rest = rest[1:]
	if len(rest) >= 2 && rest[0] == "AS" {
		s.Table = rest[1]
		rest = rest[2:]
	}
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == "INDEX" && (i == 0 || rest[i-1] != "AUTOMATIC") {
			s.Key = rest[i+1]
			break
		}
		if rest[i] == "PRIMARY" && rest[i+1] == "KEY" {
			s.Key = "PRIMARY KEY"
			break
		}
	}
	return s
}

// slProblems names what a step of SQLite's plan does that Problems
// reports, in MySQL's words: "SCAN t" reads the whole table ("a full
// table scan of t"), "SCAN t USING [COVERING] INDEX i" the whole of an
// index ("a full index scan of t (i)"), where SEARCH would read a range of
// it; "USE TEMP B-TREE FOR … ORDER BY" sorts the rows ("a sort"). SQLite
// does not say whether a scan filters rows, so every scan counts.
func (s PlanStep) slProblems() []string {
	switch {
	case s.Type == "SCAN" && s.Table != "" && s.Key != "":
		return []string{fmt.Sprintf("a full index scan of %s (%s)", s.Table, s.Key)}
	case s.Type == "SCAN" && s.Table != "" && !strings.Contains(s.Extra, "VIRTUAL TABLE"):
		return []string{"a full table scan of " + s.Table}
	case s.Type == "USE" && strings.Contains(s.Extra, "TEMP B-TREE") && strings.HasSuffix(s.Extra, "ORDER BY"):
		return []string{"a sort"}
	}
	return nil
}

// SuggestIndex implements Dialect. It reads the SQL as bun's
// sqlitedialect renders it (double quotes around identifiers, strings in
// single quotes without backslash escapes), and gives up where MySQL's
// does. An existing index serves the query when its columns, followed by
// the rowid (the primary key's column, in a table whose primary key is an
// INTEGER PRIMARY KEY) that every index of a rowid table carries, start
// with the equality columns, in any order, then the ORDER BY's. Partial
// indexes and indexes on expressions do not count.
func (SQLite) SuggestIndex(ctx context.Context, db bun.IDB, query, schema, table, alias string, pks []string) (Index, bool, error) {
	shape, ok := shapeOf(sqliteSyntax, query, table, alias, pks)
	if !ok {
		return Index{}, false, nil
	}
	existing, err := slServingIndex(ctx, db, schema, table, pks, shape)
	if err != nil {
		return Index{}, false, err
	}
	return Index{Create: shape.create(sqliteSyntax, schema, table), Existing: existing}, true, nil
}

// slServingIndex returns the name of an index of the table that serves
// the query, or "", from pragma_index_list and pragma_index_xinfo.
func slServingIndex(ctx context.Context, db bun.IDB, schema, table string, pks []string, shape indexShape) (string, error) {
	arg, args := "?", []any{table}
	if schema != "" {
		arg, args = "?, ?", []any{table, schema}
	}
	// The rowid is the primary key when the key is one INTEGER column.
	rowid := "rowid"
	if len(pks) == 1 {
		types, err := queryStrings(ctx, db, "read the columns of "+table,
			"SELECT type FROM pragma_table_info("+arg+") WHERE name = ? COLLATE NOCASE AND pk = 1", append(args, pks[0])...)
		if err != nil {
			return "", err
		}
		if len(types) == 1 && strings.EqualFold(types[0], "INTEGER") {
			rowid = pks[0]
		}
	}
	xarg := "l.name"
	if schema != "" {
		xarg = "l.name, l.schema"
	}
	rows, err := db.QueryContext(ctx, "SELECT l.name, x.cid, COALESCE(x.name, ''), x.key "+
		"FROM pragma_index_list("+arg+") AS l, pragma_index_xinfo("+xarg+") AS x "+
		"WHERE l.partial = 0 ORDER BY l.origin = 'pk' DESC, l.name, x.seqno", args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var names []string
	cols := map[string][]string{}
	bad := map[string]bool{} // indexes with an expression among their key columns
	for rows.Next() {
		var name, col string
		var cid int
		var key bool
		if err := rows.Scan(&name, &cid, &col, &key); err != nil {
			return "", err
		}
		if _, ok := cols[name]; !ok {
			names = append(names, name)
			cols[name] = nil
		}
		switch {
		case cid == -2: // an expression
			bad[name] = bad[name] || key
			if !key {
				continue
			}
		case cid == -1: // the rowid, after the key columns
			col = rowid
		}
		cols[name] = append(cols[name], col)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, name := range names {
		if !bad[name] && shape.servedBy(cols[name]) {
			return name, nil
		}
	}
	return "", nil
}
