package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/uptrace/bun"
)

// Plan is what EXPLAIN says of a query.
type Plan struct {
	// Steps are the rows of EXPLAIN, one per table read, in order; or, in
	// PostgreSQL, the nodes of the plan's tree, each before its children.
	Steps []PlanStep
}

// PlanStep is one row of a tabular EXPLAIN, which MySQL and MariaDB share,
// or one node of a PostgreSQL plan.
type PlanStep struct {
	Table string // the table's alias (or name) in the query; empty for a node that reads none
	Type  string // the access type: ALL, index, range, ref, eq_ref, const…; PostgreSQL's node type: Seq Scan, Index Scan, Sort…
	Key   string // the index read; empty for none
	Rows  string // the server's estimate of the rows it examines (PostgreSQL: returns)
	Extra string // e.g. "Using where; Using filesort"; PostgreSQL: the node's conditions and sort keys, e.g. "Index Cond: (…); Filter: (…)"

	pg pgNode // set for a node of a PostgreSQL plan
	sl bool   // set for a row of SQLite's EXPLAIN QUERY PLAN (see slProblems)
}

// pgNode is what Problems reads of a PostgreSQL plan node besides its type.
type pgNode struct {
	node      bool // the step is a PostgreSQL plan node
	filter    bool // it has a Filter: it reads rows that it drops
	indexCond bool // it has an Index Cond: it reads a range of its index
}

// String returns the step as one line:
// "t: type=ref key=status rows=1 Extra=Using where; Using filesort", or,
// for a PostgreSQL node,
// "t: Index Scan using t_status_id rows=100 Index Cond: (…)".
func (s PlanStep) String() string {
	if s.pg.node {
		return s.pgString()
	}
	if s.sl {
		return s.Extra
	}
	key := s.Key
	if key == "" {
		key = "NULL"
	}
	return fmt.Sprintf("%s: type=%s key=%s rows=%s Extra=%s", s.Table, s.Type, key, s.Rows, s.Extra)
}

// String returns the steps, separated by " | ".
func (p Plan) String() string {
	steps := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		steps[i] = s.String()
	}
	return strings.Join(steps, " | ")
}

// Explain implements Dialect. It asks for the tabular format, which MySQL
// and MariaDB share, again with FORMAT=TRADITIONAL if the server's
// explain_format (MySQL 8.0.32+) gave another.
func (MySQL) Explain(ctx context.Context, db bun.IDB, query string) (Plan, error) {
	steps, err := explainRows(ctx, db, "EXPLAIN "+query)
	if errors.Is(err, errNotTabular) {
		steps, err = explainRows(ctx, db, "EXPLAIN FORMAT=TRADITIONAL "+query)
	}
	if err != nil {
		return Plan{}, err
	}
	return Plan{Steps: steps}, nil
}

var errNotTabular = errors.New("EXPLAIN did not return the tabular format")

// explainRows runs stmt and reads its rows by column name: MySQL has
// columns (partitions, filtered) that MariaDB shows only on request.
func explainRows(ctx context.Context, db bun.IDB, stmt string) ([]PlanStep, error) {
	rows, err := db.QueryContext(ctx, stmt)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, c := range cols {
		index[strings.ToLower(c)] = i
	}
	for _, c := range []string{"table", "type", "key", "rows", "extra"} {
		if _, ok := index[c]; !ok {
			return nil, errNotTabular
		}
	}
	var steps []PlanStep
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		col := func(name string) string { return vals[index[name]].String }
		steps = append(steps, PlanStep{Table: col("table"), Type: col("type"), Key: col("key"), Rows: col("rows"), Extra: col("extra")})
	}
	return steps, rows.Err()
}

// Problems names each way the plan scans or sorts, such as "a filesort"
// or "a full table scan of t"; none for a plan that reads the rows in the
// order of an index and stops at the LIMIT. A scan (type ALL, or index:
// every entry of an index) counts only when it filters rows ("Using
// where"): without a filter it stops at the LIMIT, as a read of the whole
// table in primary key order does. A PostgreSQL plan's problems are read
// the same way from its nodes (see pgProblems).
func (p Plan) Problems() []string {
	var out []string
	add := func(problem string) {
		if !slices.Contains(out, problem) {
			out = append(out, problem)
		}
	}
	for _, s := range p.Steps {
		if s.pg.node {
			for _, problem := range s.pgProblems() {
				add(problem)
			}
			continue
		}
		if s.sl {
			for _, problem := range s.slProblems() {
				add(problem)
			}
			continue
		}
		filters := strings.Contains(s.Extra, "Using where")
		switch {
		case s.Type == "ALL" && filters:
			add("a full table scan of " + s.Table)
		case s.Type == "index" && filters:
			key := s.Key
			if key == "" {
				key = "an index"
			}
			add(fmt.Sprintf("a full index scan of %s (%s)", s.Table, key))
		}
		if strings.Contains(s.Extra, "Using filesort") {
			add("a filesort")
		}
		if strings.Contains(s.Extra, "Using temporary") {
			add("a temporary table")
		}
	}
	return out
}
