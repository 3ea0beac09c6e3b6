package sqldialect

import (
	"context"
	"database/sql"
	"strings"

	"github.com/uptrace/bun"
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
	// quote quotes identifiers; it no longer starts a string.
	quote byte
	// pg selects PostgreSQL's rules: no # comments, -- comments without
	// the space, nested block comments, backslash escapes only in E''
	// strings, dollar-quoted strings, unquoted names folded to lower case,
	// OFFSET and FETCH after the ORDER BY, NULLS FIRST or LAST in it.
	pg bool
	// sqlite selects SQLite's rules: no # comments, -- comments without
	// the space, no backslash escapes.
	sqlite bool
	// maxName is the longest identifier, in bytes.
	maxName int
}

var (
	mysqlSyntax  = syntax{quote: '`', maxName: 64}
	pgSyntax     = syntax{quote: '"', pg: true, maxName: 63}
	sqliteSyntax = syntax{quote: '"', sqlite: true, maxName: 64}
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
	toks, ok := tokenize(query, sx)
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
	for _, item := range split(order, func(t token) bool { return t.is(",") }) {
		q, col, rest := columnRef(item)
		if col == "" || !ours(q) {
			return indexShape{}, false
		}
		if sx.pg {
			// The null order each direction has by default, which an
			// index serves, read forwards or backwards.
			switch {
			case len(rest) == 2 && rest[0].isWord("NULLS") && rest[1].isWord("LAST"):
				rest = nil
			case len(rest) == 3 && rest[0].isWord("ASC") && rest[1].isWord("NULLS") && rest[2].isWord("LAST"),
				len(rest) == 3 && rest[0].isWord("DESC") && rest[1].isWord("NULLS") && rest[2].isWord("FIRST"):
				rest = rest[:1]
			}
		}
		switch {
		case len(rest) == 0 || len(rest) == 1 && rest[0].isWord("ASC"):
			add(&s.order, col, "")
		case len(rest) == 1 && rest[0].isWord("DESC"):
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

type tokenKind int

const (
	tokWord   tokenKind = iota // a keyword, function name or bare identifier
	tokIdent                   // a quoted identifier, unquoted
	tokString                  // a string literal
	tokNumber                  // a number literal
	tokPunct                   // an operator or punctuation
)

type token struct {
	kind tokenKind
	text string
}

func (t token) is(punct string) bool { return t.kind == tokPunct && t.text == punct }

func (t token) isWord(w string) bool { return t.kind == tokWord && strings.EqualFold(t.text, w) }

// tokenize splits SQL of syntax sx into tokens, dropping whitespace and
// comments. It fails on an unterminated quote or comment.
func tokenize(s string, sx syntax) ([]token, bool) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || sx.pg && c == '\f':
			i++
		case sx.pg && strings.HasPrefix(s[i:], "/*"):
			n, ok := nestedComment(s[i:])
			if !ok {
				return nil, false
			}
			i += n
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, false
			}
			i += end + 4
		case !sx.pg && !sx.sqlite && (c == '#' || strings.HasPrefix(s[i:], "-- ")),
			(sx.pg || sx.sqlite) && strings.HasPrefix(s[i:], "--"):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				end = len(s) - i
			}
			i += end
		case c == '`' || c == '\'' || c == '"':
			text, n, ok := quoted(s[i:], sx, !sx.pg && !sx.sqlite)
			if !ok {
				return nil, false
			}
			kind := tokString
			if c == sx.quote {
				kind = tokIdent
			}
			toks = append(toks, token{kind, text})
			i += n
		case sx.pg && (c == 'E' || c == 'e') && i+1 < len(s) && s[i+1] == '\'':
			text, n, ok := quoted(s[i+1:], sx, true) // E'...': backslash escapes
			if !ok {
				return nil, false
			}
			toks = append(toks, token{tokString, text})
			i += 1 + n
		case sx.pg && c == '$':
			tok, n, ok := dollar(s[i:])
			if !ok {
				return nil, false
			}
			toks = append(toks, tok)
			i += n
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i + 1
			for j < len(s) && (isWordByte(s[j]) || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j]})
			i = j
		case isWordByte(c):
			j := i + 1
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			word := s[i:j]
			if sx.pg {
				word = lowerASCII(word) // as PostgreSQL folds unquoted names
			}
			toks = append(toks, token{tokWord, word})
			i = j
		default:
			n := 1
			for _, op := range []string{"<=>", "<=", ">=", "<>", "!=", "&&", "||", ":="} {
				if strings.HasPrefix(s[i:], op) {
					n = len(op)
					break
				}
			}
			toks = append(toks, token{tokPunct, s[i : i+n]})
			i += n
		}
	}
	return toks, true
}

// quoted reads the quoted text at the start of s (a doubled quote stands
// for itself; in strings, when backslash is set, so does a
// backslash-escaped character) and returns it unquoted, with the length it
// took.
func quoted(s string, sx syntax, backslash bool) (string, int, bool) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && backslash && q != sx.quote && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i++
			b.WriteByte(q)
		case s[i] == q:
			return b.String(), i + 1, true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, false
}

// nestedComment returns the length of the PostgreSQL block comment at the
// start of s, whose inner block comments nest.
func nestedComment(s string) (int, bool) {
	depth := 0
	for i := 0; i+1 < len(s); i++ {
		switch {
		case s[i] == '/' && s[i+1] == '*':
			depth++
			i++
		case s[i] == '*' && s[i+1] == '/':
			depth--
			i++
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// dollar reads what starts with $ in PostgreSQL: a dollar-quoted string
// ($$text$$ or $tag$text$tag$), or a parameter ($1), taken for a value.
func dollar(s string) (token, int, bool) {
	j := 1
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j > 1 {
		return token{tokNumber, s[:j]}, j, true
	}
	for j < len(s) && s[j] != '$' && isWordByte(s[j]) {
		j++
	}
	if j == len(s) || s[j] != '$' {
		return token{}, 0, false // a lone $ is not SQL
	}
	tag := s[:j+1]
	end := strings.Index(s[len(tag):], tag)
	if end < 0 {
		return token{}, 0, false
	}
	return token{tokString, s[len(tag) : len(tag)+end]}, 2*len(tag) + end, true
}

// lowerASCII folds the ASCII letters of s to lower case.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// clauses returns the tokens of the top-level WHERE and ORDER BY of a
// SELECT, and whether its FROM joins more than one table. It fails on
// what makes the columns of those clauses no guide to an index: GROUP BY,
// HAVING, DISTINCT, UNION, a window.
func clauses(toks []token, sx syntax) (where, order []token, joined, ok bool) {
	var clause *[]token
	var from bool // inside the top-level FROM
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.is("("):
			depth++
		case t.is(")"):
			depth--
		}
		if depth > 0 || t.is(")") {
			if clause != nil {
				*clause = append(*clause, t)
			}
			continue
		}
		next := func(w string) bool { return i+1 < len(toks) && toks[i+1].isWord(w) }
		switch {
		case t.isWord("GROUP") || t.isWord("HAVING") || t.isWord("DISTINCT") || t.isWord("UNION") || t.isWord("WINDOW"):
			return nil, nil, false, false
		case t.isWord("FROM"):
			from, clause = true, nil
		case t.isWord("WHERE"):
			from, clause = false, &where
		case t.isWord("ORDER") && next("BY"):
			from, clause = false, &order
			i++
		case t.isWord("LIMIT") || t.isWord("FOR") || t.isWord("LOCK") || t.isWord("INTO"),
			sx.pg && (t.isWord("OFFSET") || t.isWord("FETCH")):
			from, clause = false, nil
		case from && (t.is(",") || t.isWord("JOIN") || t.isWord("STRAIGHT_JOIN")):
			joined = true
		case clause != nil:
			*clause = append(*clause, t)
		}
	}
	return where, order, joined, depth == 0
}

// split cuts toks at the top-level tokens for which sep is true.
func split(toks []token, sep func(token) bool) [][]token {
	if len(toks) == 0 {
		return nil
	}
	var out [][]token
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case t.is("("):
			depth++
		case t.is(")"):
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
func conjuncts(toks []token) [][]token {
	var out [][]token
	for _, c := range split(toks, func(t token) bool { return t.isWord("AND") || t.is("&&") }) {
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
func unwrap(toks []token) []token {
	for len(toks) >= 2 && toks[0].is("(") && toks[len(toks)-1].is(")") {
		depth := 0
		for i, t := range toks {
			switch {
			case t.is("("):
				depth++
			case t.is(")"):
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
func equality(c []token, sx syntax) (qualifier, col string, ok bool) {
	if q, col, rest := columnRef(c); col != "" {
		switch {
		case len(rest) >= 2 && (rest[0].is("=") || rest[0].is("<=>")) && isConstant(rest[1:]):
			return q, col, true
		case len(rest) == 2 && rest[0].isWord("IS") && rest[1].isWord("NULL") && !sx.pg:
			return q, col, true
		case len(rest) >= 3 && rest[0].isWord("IN") && rest[1].is("(") && rest[len(rest)-1].is(")") &&
			isConstant(rest[2:len(rest)-1]):
			return q, col, true
		}
	}
	// constant = col
	for i, t := range c {
		if t.is("=") || t.is("<=>") {
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
func isConstant(toks []token) bool {
	if len(toks) == 2 && (toks[0].is("-") || toks[0].is("+")) {
		toks = toks[1:]
	}
	if len(toks) != 1 {
		return false
	}
	t := toks[0]
	return t.kind == tokString || t.kind == tokNumber || t.isWord("TRUE") || t.isWord("FALSE")
}

// columnRef reads a column reference (col, t.col or db.t.col) at the start
// of toks, and returns its qualifier, the column and the tokens after it;
// col is empty when toks do not start with one.
func columnRef(toks []token) (qualifier, col string, rest []token) {
	name := func(t token) bool {
		return t.kind == tokIdent || t.kind == tokWord && !isKeyword(t.text)
	}
	n := 0
	for n < len(toks) && name(toks[n]) {
		if n+2 < len(toks) && toks[n+1].is(".") && name(toks[n+2]) {
			n += 2
			continue
		}
		n++
		break
	}
	if n == 0 || n < len(toks) && toks[n].is("(") {
		return "", "", toks // nothing, or a function call
	}
	col = toks[n-1].text
	if n >= 3 {
		qualifier = toks[n-3].text
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
	q := string(sx.quote)
	return q + strings.ReplaceAll(s, q, q+q) + q
}

// indexName makes an index name of s: letters, digits and underscores, at
// most the server's limit (64 bytes in MySQL, 63 in PostgreSQL; 64 in SQLite,
// which has none).
func (sx syntax) indexName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isWordByte(c) || c >= 0x80 || c == '$' {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), sx.maxName)])
}
