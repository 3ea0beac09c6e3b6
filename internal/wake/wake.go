// Package wake is the wake-up query hook of the root package's
// Client.QueryHook, and its reading of SQL statements.
//
// The hook (Hook) wakes a sleeping worker of each queue over a table
// that a statement written through the app's DB changed (Watch, Target):
// at once, or when the transaction it ran in commits; and it ends the
// send span of an Enqueue through a bun.Tx with that transaction
// (PendingSend). It is safe for concurrent use, never blocks and starts
// no goroutines.
//
// Its reading (Targets) tells whether a statement is an INSERT, a
// REPLACE or an UPDATE, and which tables it writes, read from the start
// of its text; other readers of an UPDATE share pieces of it (its table
// references, a WITH clause, identifiers). It reads MySQL's syntax,
// which also covers what bun writes for PostgreSQL and SQLite at the
// start of a write (names in "double quotes" are read as identifiers).
// It reads through internal/sqltoken and allocates nothing of its own.
package wake

import (
	"strings"

	"github.com/bunqueue/bunqueue/internal/sqltoken"
)

// Op is what a statement does, as far as the wake-up hook cares.
type Op uint8

// The statements Targets tells apart.
const (
	// NotWrite is any statement but an INSERT, a REPLACE or an UPDATE.
	NotWrite Op = iota
	// Insert is an INSERT or a REPLACE.
	Insert
	// Update is an UPDATE.
	Update
)

// Table is a table a statement names, lower-case; Schema is empty when
// the statement names none.
type Table struct{ Schema, Name string }

// Targets reads the start of a MySQL statement: if it is an INSERT
// or REPLACE, it appends the table it inserts into to refs; if it is an
// UPDATE, every table named in its table references (before SET). It
// skips comments, a leading WITH clause and modifiers such as IGNORE, and
// reads quoted and schema-qualified names ("name" too, as under
// ANSI_QUOTES and on PostgreSQL). It returns NotWrite for any other
// statement.
func Targets(query string, refs []Table) (Op, []Table) {
	s := sqltoken.NewScanner(query, sqltoken.MySQL)
	kw := s.Next()
	if kw.Kind != sqltoken.Word {
		return NotWrite, refs
	}
	if kw.IsWord("WITH") {
		kw = AfterWith(&s)
	}
	switch {
	case kw.IsWord("INSERT") || kw.IsWord("REPLACE"):
		t := s.Next()
		for IsAnyWord(t, "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE") {
			t = s.Next()
		}
		if t.IsWord("INTO") {
			t = s.Next()
		}
		if ref, ok := table(&s, t); ok {
			refs = append(refs, ref)
		}
		return Insert, refs
	case kw.IsWord("UPDATE"):
		refs, _ = UpdateTables(&s, refs)
		return Update, refs
	}
	return NotWrite, refs
}

// UpdateTables reads the table references of an UPDATE, after its
// keyword, appends each table they name to refs, and reports whether
// their end was SET; s is then after it.
func UpdateTables(s *sqltoken.Scanner, refs []Table) ([]Table, bool) {
	t := s.Next()
	for IsAnyWord(t, "LOW_PRIORITY", "IGNORE") {
		t = s.Next()
	}
	depth, expect := 0, true
	for ; t.Kind != sqltoken.End; t = s.Next() {
		switch {
		case t.Is("("):
			depth++
			expect = false
		case t.Is(")"):
			depth = max(depth-1, 0)
		case depth > 0:
		case t.Is(","):
			expect = true
		case t.IsWord("SET"):
			return refs, true
		case IsAnyWord(t, "JOIN", "STRAIGHT_JOIN"):
			expect = true
		case expect:
			expect = false
			if ref, ok := table(s, t); ok {
				refs = append(refs, ref)
			}
		}
	}
	return refs, false
}

// IsAnyWord reports whether t is one of words, in any case.
func IsAnyWord(t sqltoken.Token, words ...string) bool {
	for _, w := range words {
		if t.IsWord(w) {
			return true
		}
	}
	return false
}

// AfterWith skips a WITH clause, s being after its keyword, and returns
// the keyword of the statement it belongs to (End if there is none).
func AfterWith(s *sqltoken.Scanner) sqltoken.Token {
	depth := 0
	for {
		t := s.Next()
		switch {
		case t.Kind == sqltoken.End:
			return t
		case t.Is("("):
			depth++
		case t.Is(")"):
			depth = max(depth-1, 0)
		case depth == 0 && IsAnyWord(t, "SELECT", "INSERT", "REPLACE", "UPDATE", "DELETE"):
			return t
		}
	}
}

// table reads a table name that starts with the token t, and a schema
// before it if there is one.
func table(s *sqltoken.Scanner, t sqltoken.Token) (Table, bool) {
	name, ok := Identifier(t)
	if !ok {
		return Table{}, false
	}
	if !s.Peek().Is(".") {
		return Table{Name: name}, true
	}
	s.Next()
	table, ok := Identifier(s.Next())
	if !ok {
		return Table{}, false
	}
	return Table{Schema: name, Name: table}, true
}

// Identifier returns the lower-case name a token names, if it names one:
// a word (a number, for a name that starts with a digit), a quoted
// identifier, or a string in double quotes.
func Identifier(t sqltoken.Token) (string, bool) {
	switch {
	case t.Kind == sqltoken.Word || t.Kind == sqltoken.Number || t.Kind == sqltoken.Ident,
		t.Kind == sqltoken.String && t.Text[0] == '"':
		return strings.ToLower(t.Value), true
	}
	return "", false
}
