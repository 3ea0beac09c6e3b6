package sqldialect

import (
	"context"
	"database/sql"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqltoken"
)

// Index is an index that would serve a query.
type Index struct {
	// Create is the CREATE INDEX statement that makes it.
	Create string
	// Existing names an index of the table that serves the query as
	// well; empty when none does. The server may still choose another
	// plan while the table is small.
	Existing string
}

// SuggestIndex implements Dialect. It reads the SQL as bun's mysqldialect
// renders it (backticks around identifiers, strings in single or double
// quotes). It gives up, rather than guess, on GROUP BY, HAVING, DISTINCT
// or UNION, on an ORDER BY item that is not a plain column, on a column
// of the ORDER BY that may belong to a joined table, and when the index
// would only repeat the primary key. An existing index serves the query
// when its columns, followed by the primary key's (InnoDB keeps them in
// every index), start with the equality columns, in any order, then the
// ORDER BY's.
func (MySQL) SuggestIndex(ctx context.Context, db bun.IDB, query, schema, table, alias string, pks []string) (Index, bool, error) {
	shape, ok := shapeOf(mysqlSyntax, query, table, alias, pks)
	if !ok {
		return Index{}, false, nil
	}
	existing, err := servingIndex(ctx, db, schema, table, pks, shape)
	if err != nil {
		return Index{}, false, err
	}
	return Index{Create: shape.create(mysqlSyntax, schema, table), Existing: existing}, true, nil
}

// syntax is what the SQL that SuggestIndex reads and writes looks like on
// a server.
type syntax struct {
	// Syntax is how the SQL is split into tokens, and with PG,
	// PostgreSQL's clauses too: OFFSET and FETCH after the ORDER BY,
	// NULLS FIRST or LAST in it.
	sqltoken.Syntax
	// maxName is the longest identifier, in bytes.
	maxName int
}

var (
	mysqlSyntax  = syntax{Syntax: sqltoken.MySQL, maxName: 64}
	pgSyntax     = syntax{Syntax: sqltoken.Postgres, maxName: 63}
	sqliteSyntax = syntax{Syntax: sqltoken.SQLite, maxName: 64}
)

// indexShape is the index that serves a query.
type indexShape struct {
	eq    []string // the columns of its equality conditions, in any order
	order []string // then those of its ORDER BY, each with " DESC" if descending
	pks   []string // then the primary key's others
}

// create returns the CREATE INDEX statement of the index.
func (s indexShape) create(sx syntax, schema, table string) string {
	on := sx.quoteIdent(table)
	if schema != "" {
		on = sx.quoteIdent(schema) + "." + on
	}
	name := table
	var quoted []string
	for _, c := range append(append(append([]string(nil), s.eq...), s.order...), s.pks...) {
		col, desc := strings.CutSuffix(c, " DESC")
		name += "_" + col
		q := sx.quoteIdent(col)
		if desc {
			q += " DESC"
		}
		quoted = append(quoted, q)
	}
	return "CREATE INDEX " + sx.quoteIdent(sx.indexName(name)) + " ON " + on + " (" + strings.Join(quoted, ", ") + ")"
}

// servedBy reports whether an index with these columns serves the query.
func (s indexShape) servedBy(cols []string) bool {
	n := len(s.eq)
	if len(cols) < n+len(s.order) {
		return false
	}
	for _, c := range cols[:n] {
		if !containsFold(s.eq, c) {
			return false
		}
	}
	for i, o := range s.order {
		if !strings.EqualFold(cols[n+i], strings.TrimSuffix(o, " DESC")) {
			return false
		}
	}
	return true
}

// servingIndex returns the name of an index of the table that serves the
// query, or "".
func servingIndex(ctx context.Context, db bun.IDB, schema, table string, pks []string, shape indexShape) (string, error) {
	q := "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX"
	args := []any{table}
	if schema != "" {
		q = strings.Replace(q, "DATABASE()", "?", 1)
		args = []any{schema, table}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var names []string
	cols := map[string][]string{}
	for rows.Next() {
		var name string
		var col sql.NullString // NULL for a part that is an expression
		if err := rows.Scan(&name, &col); err != nil {
			return "", err
		}
		if _, ok := cols[name]; !ok {
			names = append(names, name)
		}
		cols[name] = append(cols[name], col.String)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, name := range names {
		key := cols[name]
		if name != "PRIMARY" {
			for _, pk := range pks {
				if !containsFold(key, pk) {
					key = append(key, pk)
				}
			}
		}
		if shape.servedBy(key) {
			return name, nil
		}
	}
	return "", nil
}

// shapeOf derives the index that serves query from the columns of its
// WHERE's top-level equality conditions (col = constant, col <=>
// constant, col IN (constant), col IS NULL but in PostgreSQL) and of its
// ORDER BY.
func shapeOf(sx syntax, query, table, alias string, pks []string) (indexShape, bool) {
	toks, ok := sqltoken.Split(query, sx.Syntax)
	if !ok {
		return indexShape{}, false
	}
	where, order, joined, ok := clauses(toks, sx)
	if !ok {
		return indexShape{}, false
	}
	ours := func(qualifier string) bool {
		if qualifier == "" {
			return !joined
		}
		return strings.EqualFold(qualifier, alias) || strings.EqualFold(qualifier, table)
	}
	var s indexShape
	var seen []string
	add := func(to *[]string, col, suffix string) {
		if !containsFold(seen, col) {
			seen = append(seen, col)
			*to = append(*to, col+suffix)
		}
	}
	for _, c := range conjuncts(where) {
		if q, col, ok := equality(c, sx); ok && ours(q) {
			add(&s.eq, col, "")
		}
	}
	for _, item := range split(order, func(t sqltoken.Token) bool { return t.Is(",") }) {
		q, col, rest := columnRef(item)
		if col == "" || !ours(q) {
			return indexShape{}, false
		}
		if sx.PG {
			// The null order each direction has by default, which an
			// index serves, read forwards or backwards.
			switch {
			case len(rest) == 2 && rest[0].IsWord("NULLS") && rest[1].IsWord("LAST"):
				rest = nil
			case len(rest) == 3 && rest[0].IsWord("ASC") && rest[1].IsWord("NULLS") && rest[2].IsWord("LAST"),
				len(rest) == 3 && rest[0].IsWord("DESC") && rest[1].IsWord("NULLS") && rest[2].IsWord("FIRST"):
				rest = rest[:1]
			}
		}
		switch {
		case len(rest) == 0 || len(rest) == 1 && rest[0].IsWord("ASC"):
			add(&s.order, col, "")
		case len(rest) == 1 && rest[0].IsWord("DESC"):
			add(&s.order, col, " DESC")
		default:
			return indexShape{}, false
		}
	}
	// Nothing before the primary key, or only some of its own columns:
	// the primary key is that index already.
	onlyPK := true
	for _, c := range seen {
		onlyPK = onlyPK && containsFold(pks, c)
	}
	if onlyPK {
		return indexShape{}, false
	}
	for _, pk := range pks {
		add(&s.pks, pk, "")
	}
	return s, true
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// clauses returns the tokens of the top-level WHERE and ORDER BY of a
// SELECT, and whether its FROM joins more than one table. It fails on
// what makes the columns of those clauses no guide to an index: GROUP BY,
// HAVING, DISTINCT, UNION, a window.
func clauses(toks []sqltoken.Token, sx syntax) (where, order []sqltoken.Token, joined, ok bool) {
	var clause *[]sqltoken.Token
	var from bool // inside the top-level FROM
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.Is("("):
			depth++
		case t.Is(")"):
			depth--
		}
		if depth > 0 || t.Is(")") {
			if clause != nil {
				*clause = append(*clause, t)
			}
			continue
		}
		next := func(w string) bool { return i+1 < len(toks) && toks[i+1].IsWord(w) }
		switch {
		case t.IsWord("GROUP") || t.IsWord("HAVING") || t.IsWord("DISTINCT") || t.IsWord("UNION") || t.IsWord("WINDOW"):
			return nil, nil, false, false
		case t.IsWord("FROM"):
			from, clause = true, nil
		case t.IsWord("WHERE"):
			from, clause = false, &where
		case t.IsWord("ORDER") && next("BY"):
			from, clause = false, &order
			i++
		case t.IsWord("LIMIT") || t.IsWord("FOR") || t.IsWord("LOCK") || t.IsWord("INTO"),
			sx.PG && (t.IsWord("OFFSET") || t.IsWord("FETCH")):
			from, clause = false, nil
		case from && (t.Is(",") || t.IsWord("JOIN") || t.IsWord("STRAIGHT_JOIN")):
			joined = true
		case clause != nil:
			*clause = append(*clause, t)
		}
	}
	return where, order, joined, depth == 0
}

// split cuts toks at the top-level tokens for which sep is true.
func split(toks []sqltoken.Token, sep func(sqltoken.Token) bool) [][]sqltoken.Token {
	if len(toks) == 0 {
		return nil
	}
	var out [][]sqltoken.Token
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case t.Is("("):
			depth++
		case t.Is(")"):
			depth--
		case depth == 0 && sep(t):
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// conjuncts returns the conditions that a WHERE ANDs together, opening
// parentheses: (a AND (b AND c)) gives a, b and c.
func conjuncts(toks []sqltoken.Token) [][]sqltoken.Token {
	var out [][]sqltoken.Token
	for _, c := range split(toks, func(t sqltoken.Token) bool { return t.IsWord("AND") || t.Is("&&") }) {
		inner := unwrap(c)
		if len(inner) < len(c) {
			out = append(out, conjuncts(inner)...)
			continue
		}
		out = append(out, c)
	}
	return out
}

// unwrap removes parentheses around the whole of toks.
func unwrap(toks []sqltoken.Token) []sqltoken.Token {
	for len(toks) >= 2 && toks[0].Is("(") && toks[len(toks)-1].Is(")") {
		depth := 0
		for i, t := range toks {
			switch {
			case t.Is("("):
				depth++
			case t.Is(")"):
				depth--
			}
			if depth == 0 && i < len(toks)-1 {
				return toks // "(a) OR (b)": the first parenthesis closes early
			}
		}
		toks = toks[1 : len(toks)-1]
	}
	return toks
}

// equality reports whether the condition fixes one column to one value,
// and returns that column and its qualifier. In PostgreSQL, col IS NULL
// does not count: the planner does not take an index's rows where a
// column is NULL to be in the order of the columns after it.
func equality(c []sqltoken.Token, sx syntax) (qualifier, col string, ok bool) {
	if q, col, rest := columnRef(c); col != "" {
		switch {
		case len(rest) >= 2 && (rest[0].Is("=") || rest[0].Is("<=>")) && isConstant(rest[1:]):
			return q, col, true
		case len(rest) == 2 && rest[0].IsWord("IS") && rest[1].IsWord("NULL") && !sx.PG:
			return q, col, true
		case len(rest) >= 3 && rest[0].IsWord("IN") && rest[1].Is("(") && rest[len(rest)-1].Is(")") &&
			isConstant(rest[2:len(rest)-1]):
			return q, col, true
		}
	}
	// constant = col
	for i, t := range c {
		if t.Is("=") || t.Is("<=>") {
			if q, col, rest := columnRef(c[i+1:]); col != "" && len(rest) == 0 && isConstant(c[:i]) {
				return q, col, true
			}
			break
		}
	}
	return "", "", false
}

// isConstant reports whether toks are one literal: a string, a number
// (signed or not), TRUE or FALSE.
func isConstant(toks []sqltoken.Token) bool {
	if len(toks) == 2 && (toks[0].Is("-") || toks[0].Is("+")) {
		toks = toks[1:]
	}
	if len(toks) != 1 {
		return false
	}
	t := toks[0]
	return t.Kind == sqltoken.String || t.Kind == sqltoken.Number || t.IsWord("TRUE") || t.IsWord("FALSE")
}

// columnRef reads a column reference (col, t.col or db.t.col) at the start
// of toks, and returns its qualifier, the column and the tokens after it;
// col is empty when toks do not start with one.
func columnRef(toks []sqltoken.Token) (qualifier, col string, rest []sqltoken.Token) {
	name := func(t sqltoken.Token) bool {
		return t.Kind == sqltoken.Ident || t.Kind == sqltoken.Word && !isKeyword(t.Value)
	}
	n := 0
	for n < len(toks) && name(toks[n]) {
		if n+2 < len(toks) && toks[n+1].Is(".") && name(toks[n+2]) {
			n += 2
			continue
		}
		n++
		break
	}
	if n == 0 || n < len(toks) && toks[n].Is("(") {
		return "", "", toks // nothing, or a function call
	}
	col = toks[n-1].Value
	if n >= 3 {
		qualifier = toks[n-3].Value
	}
	return qualifier, col, toks[n:]
}

// isKeyword reports whether a bare word is one of the keywords that can
// stand where a column could in a condition or an ORDER BY item.
func isKeyword(w string) bool {
	switch strings.ToUpper(w) {
	case "NOT", "NULL", "TRUE", "FALSE", "CASE", "EXISTS", "INTERVAL", "BINARY", "DEFAULT", "ROW", "SELECT":
		return true
	}
	return false
}

// quoteIdent quotes an identifier.
func (sx syntax) quoteIdent(s string) string {
	q := string(sx.Quote)
	return q + strings.ReplaceAll(s, q, q+q) + q
}

// indexName makes an index name of s: letters, digits and underscores, at
// most the server's limit (64 bytes in MySQL, 63 in PostgreSQL; 64 in SQLite,
// which has none).
func (sx syntax) indexName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), sx.maxName)])
}
