package sqltoken_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/sqltoken"
)

// show renders tokens as kind:value, one word each, for comparison.
func show(toks []sqltoken.Token) string {
	names := map[sqltoken.Kind]string{sqltoken.Word: "w", sqltoken.Ident: "i", sqltoken.String: "s", sqltoken.Number: "n", sqltoken.Punct: "p"}
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = fmt.Sprintf("%s:%s", names[t.Kind], t.Value)
	}
	return strings.Join(out, " ")
}

func TestSplit(t *testing.T) {
	t.Parallel()
	my, pg, sl := sqltoken.MySQL, sqltoken.Postgres, sqltoken.SQLite
	tests := []struct {
		name string
		sx   sqltoken.Syntax
		sql  string
		want string // "" with ok false: it cannot be read
	}{
		{"words, numbers, operators", my, "SELECT a1, 2.5e3 FROM t WHERE x<=>-.5 AND y != 1", "w:SELECT w:a1 p:, n:2.5e3 w:FROM w:t w:WHERE w:x p:<=> p:- n:.5 w:AND w:y p:!= n:1"},
		{"MySQL comments", my, "/* a */ -- b\n# c\n--\tc\nINSERT/*+ hint */INTO t -- d", "w:INSERT w:INTO w:t"},
		{"MySQL: -- needs a space", my, "a --b", "w:a p:- p:- w:b"},
		{"MySQL quotes", my, "`a``b` 'it''s' 'a\\'b' \"q\\\" x\"", "i:a`b s:it's s:a'b s:q\" x"},
		{"MySQL: # and -- at the end", my, "a #", "w:a"},
		{"PostgreSQL: names fold, -- and nested comments", pg, "SELECT \"Mixed\" FROM Tbl --x\n/* a /* b */ c */ WHERE", "w:select i:Mixed w:from w:tbl w:where"},
		{"PostgreSQL strings", pg, "'a\\' E'b\\'c' $$d$$ $t$e$$t$ $1 x#y", "s:a\\ s:b'c s:d s:e$ n:$1 w:x p:# w:y"},
		{"SQLite", sl, "\"a\"\"b\" 'c\\' --x\n#", "i:a\"b s:c\\ p:#"},
		{"unterminated string", my, "a 'b", ""},
		{"unterminated identifier", my, "`a", ""},
		{"unterminated comment", my, "a /* b", ""},
		{"unterminated nested comment", pg, "a /* /* */", ""},
		{"a lone $", pg, "a $ b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			toks, ok := sqltoken.Split(tt.sql, tt.sx)
			if tt.want == "" {
				require.False(t, ok, show(toks))
				return
			}
			require.True(t, ok)
			require.Equal(t, tt.want, show(toks))
		})
	}
}

// Text keeps the token as written; Peek does not take it.
func TestScanner(t *testing.T) {
	t.Parallel()
	s := sqltoken.NewScanner(" `db` . `t``x` 'v'", sqltoken.MySQL)
	require.Equal(t, "`db`", s.Next().Text)
	require.True(t, s.Peek().Is("."))
	require.True(t, s.Next().Is("."))
	tok := s.Next()
	require.Equal(t, sqltoken.Token{Kind: sqltoken.Ident, Text: "`t``x`", Value: "t`x"}, tok)
	require.Equal(t, sqltoken.Token{Kind: sqltoken.String, Text: "'v'", Value: "v"}, s.Next())
	require.Equal(t, sqltoken.End, s.Next().Kind)
	require.False(t, s.Err())
	require.True(t, sqltoken.Token{Kind: sqltoken.Word, Text: "select"}.IsWord("SELECT"))

	bad := sqltoken.NewScanner("a 'b", sqltoken.MySQL)
	require.True(t, bad.Next().IsWord("a"))
	require.Equal(t, sqltoken.End, bad.Next().Kind)
	require.True(t, bad.Err())
}
