package sqldialect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
)

// Explain implements Dialect with EXPLAIN (FORMAT JSON): each node of the
// plan's tree is a step, before its children. Problems reads them as it
// reads MySQL's: see pgProblems.
func (Postgres) Explain(ctx context.Context, db bun.IDB, query string) (Plan, error) {
	rows, err := db.QueryContext(ctx, "EXPLAIN (FORMAT JSON) "+query)
	if err != nil {
		return Plan{}, err
	}
	defer rows.Close()
	var text strings.Builder
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return Plan{}, err
		}
		text.WriteString(s)
	}
	if err := rows.Err(); err != nil {
		return Plan{}, err
	}
	var out []struct {
		Plan pgPlanNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(text.String()), &out); err != nil {
		return Plan{}, fmt.Errorf("read the plan of EXPLAIN (FORMAT JSON): %w", err)
	}
	var p Plan
	for _, o := range out {
		o.Plan.appendSteps(&p.Steps)
	}
	return p, nil
}

// pgPlanNode is what Explain reads of a node of EXPLAIN (FORMAT JSON).
type pgPlanNode struct {
	NodeType     string       `json:"Node Type"`
	Alias        string       `json:"Alias"`
	IndexName    string       `json:"Index Name"`
	PlanRows     json.Number  `json:"Plan Rows"`
	IndexCond    string       `json:"Index Cond"`
	RecheckCond  string       `json:"Recheck Cond"`
	Filter       string       `json:"Filter"`
	JoinFilter   string       `json:"Join Filter"`
	HashCond     string       `json:"Hash Cond"`
	MergeCond    string       `json:"Merge Cond"`
	SortKey      []string     `json:"Sort Key"`
	PresortedKey []string     `json:"Presorted Key"`
	Plans        []pgPlanNode `json:"Plans"`
}

// appendSteps appends the node's step, then its children's, to steps.
func (n pgPlanNode) appendSteps(steps *[]PlanStep) {
	var extra []string
	for _, f := range []struct{ name, value string }{
		{"Index Cond", n.IndexCond},
		{"Recheck Cond", n.RecheckCond},
		{"Hash Cond", n.HashCond},
		{"Merge Cond", n.MergeCond},
		{"Join Filter", n.JoinFilter},
		{"Filter", n.Filter},
		{"Presorted Key", strings.Join(n.PresortedKey, ", ")},
		{"Sort Key", strings.Join(n.SortKey, ", ")},
	} {
		if f.value != "" {
			extra = append(extra, f.name+": "+f.value)
		}
	}
	*steps = append(*steps, PlanStep{
		Table: n.Alias,
		Type:  n.NodeType,
		Key:   n.IndexName,
		Rows:  n.PlanRows.String(),
		Extra: strings.Join(extra, "; "),
		pg:    pgNode{node: true, filter: n.Filter != "", indexCond: n.IndexCond != ""},
	})
	for _, c := range n.Plans {
		c.appendSteps(steps)
	}
}

// pgString returns a PostgreSQL node as one line:
// "t: Index Scan using t_status_id rows=100 Index Cond: (…)", or
// "Sort rows=100 Sort Key: t.retry_at" for a node that reads no table.
func (s PlanStep) pgString() string {
	var b strings.Builder
	if s.Table != "" {
		b.WriteString(s.Table + ": ")
	}
	b.WriteString(s.Type)
	if s.Key != "" {
		b.WriteString(" using " + s.Key)
	}
	b.WriteString(" rows=" + s.Rows)
	if s.Extra != "" {
		b.WriteString(" " + s.Extra)
	}
	return b.String()
}

// pgProblems names what a PostgreSQL node does that Problems reports, in
// MySQL's words where they fit: a Seq Scan with a Filter is "a full table
// scan", an Index Scan or Index Only Scan with a Filter but no Index Cond
// (every entry of the index, read for its order) "a full index scan", a
// Sort or Incremental Sort "a sort". As in MySQL, a scan without a Filter
// stops at the LIMIT, and is no problem unless a sort reads it whole.
func (s PlanStep) pgProblems() []string {
	table := s.Table
	if table == "" {
		table = "a table"
	}
	switch s.Type {
	case "Seq Scan":
		if s.pg.filter {
			return []string{"a full table scan of " + table}
		}
	case "Index Scan", "Index Only Scan":
		if s.pg.filter && !s.pg.indexCond {
			return []string{fmt.Sprintf("a full index scan of %s (%s)", table, s.Key)}
		}
	case "Sort", "Incremental Sort":
		return []string{"a sort"}
	}
	return nil
}

// SuggestIndex implements Dialect. It reads the SQL as bun's pgdialect
// renders it (double quotes around identifiers, strings in single quotes,
// unquoted names folded to lower case), and gives up where MySQL's does,
// and on an ORDER BY with a null order other than its direction's
// default. Neither col IS NULL nor col = constant::type counts as an
// equality. An existing index serves the query when it is
// a valid, complete (not partial) btree index whose key columns start
// with the equality columns, in any order, then the ORDER BY's, read all
// forwards or all backwards. Unlike InnoDB, a PostgreSQL index does not
// carry the primary key's columns.
func (Postgres) SuggestIndex(ctx context.Context, db bun.IDB, query, schema, table, alias string, pks []string) (Index, bool, error) {
	shape, ok := shapeOf(pgSyntax, query, table, alias, pks)
	if !ok {
		return Index{}, false, nil
	}
	existing, err := pgServingIndex(ctx, db, schema, table, shape)
	if err != nil {
		return Index{}, false, err
	}
	return Index{Create: shape.create(pgSyntax, schema, table), Existing: existing}, true, nil
}

// pgIndexColumn is a key column of a PostgreSQL index.
type pgIndexColumn struct {
	name       string // empty for an expression
	desc       bool   // sorted descending
	nullsFirst bool   // nulls sort first
}

// pgServingIndex returns the name of an index of the table that serves the
// query, or "".
func pgServingIndex(ctx context.Context, db bun.IDB, schema, table string, shape indexShape) (string, error) {
	// indkey and indoption are int2vectors, indexed from 0; indoption bit
	// 0 is DESC, bit 1 NULLS FIRST.
	rows, err := db.QueryContext(ctx, "SELECT c.relname, COALESCE(a.attname, ''), (i.indoption[k.n] & 1) = 1, (i.indoption[k.n] & 2) = 2 "+
		"FROM pg_index i "+
		"JOIN pg_class c ON c.oid = i.indexrelid "+
		"JOIN pg_am am ON am.oid = c.relam "+
		"CROSS JOIN LATERAL generate_series(0, i.indnkeyatts - 1) AS k(n) "+
		"LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k.n] AND i.indkey[k.n] <> 0 "+
		"WHERE i.indrelid = to_regclass(?) AND i.indisvalid AND i.indpred IS NULL AND am.amname = 'btree' "+
		"ORDER BY i.indisprimary DESC, c.relname, k.n", regclass(schema, table))
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var names []string
	cols := map[string][]pgIndexColumn{}
	for rows.Next() {
		var name string
		var c pgIndexColumn
		if err := rows.Scan(&name, &c.name, &c.desc, &c.nullsFirst); err != nil {
			return "", err
		}
		if _, ok := cols[name]; !ok {
			names = append(names, name)
		}
		cols[name] = append(cols[name], c)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, name := range names {
		if shape.servedByPG(cols[name]) {
			return name, nil
		}
	}
	return "", nil
}

// servedByPG reports whether a PostgreSQL index with these key columns
// serves the query: the equality columns, in any order, then the ORDER
// BY's, each in its direction with its default null order, or each the
// other way round (a backward scan).
func (s indexShape) servedByPG(cols []pgIndexColumn) bool {
	n := len(s.eq)
	if len(cols) < n+len(s.order) {
		return false
	}
	for _, c := range cols[:n] {
		if !containsFold(s.eq, c.name) {
			return false
		}
	}
	backward := false
	for i, o := range s.order {
		name, desc := strings.CutSuffix(o, " DESC")
		c := cols[n+i]
		if !strings.EqualFold(c.name, name) || c.nullsFirst != c.desc {
			return false
		}
		if i == 0 {
			backward = c.desc != desc
		} else if backward != (c.desc != desc) {
			return false
		}
	}
	return true
}
