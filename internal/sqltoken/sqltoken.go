// Package sqltoken splits SQL text into tokens by the lexical rules of
// MySQL (and MariaDB), PostgreSQL or SQLite: words, quoted identifiers,
// strings, numbers and punctuation, with white space and comments
// dropped. bunqueue reads SQL in two places, the query hook (which tables
// a write names) and the index advice (the columns of a queue's WHERE and
// ORDER BY), and both read it through this one scanner.
//
// It is a lexer, not a parser: it knows where a string or a comment ends,
// so that a keyword inside one is not taken for the statement's, and
// nothing of what the tokens mean.
package sqltoken

import "strings"

// Syntax is the lexical rules of one server's SQL.
type Syntax struct {
	// Quote quotes identifiers; the other quote characters start
	// strings.
	Quote byte
	// PG selects PostgreSQL's rules: no # comments, -- comments without
	// the space, nested block comments, backslash escapes only in E''
	// strings, dollar-quoted strings and $n parameters, unquoted names
	// folded to lower case.
	PG bool
	// SQLite selects SQLite's rules: no # comments, -- comments without
	// the space, no backslash escapes.
	SQLite bool
}

// The syntaxes of the servers bunqueue runs on.
var (
	MySQL    = Syntax{Quote: '`'}
	Postgres = Syntax{Quote: '"', PG: true}
	SQLite   = Syntax{Quote: '"', SQLite: true}
)

// mysql reports whether sx is MySQL's: # and "-- " comments, backslash
// escapes in every string.
func (sx Syntax) mysql() bool { return !sx.PG && !sx.SQLite }

// Kind is what a token is.
type Kind uint8

// The kinds of token.
const (
	// End is past the last token, or at SQL the scanner cannot read (see
	// Scanner.Err).
	End Kind = iota
	// Word is a keyword, a function's name or a bare identifier.
	Word
	// Ident is a quoted identifier.
	Ident
	// String is a string literal.
	String
	// Number is a number literal, or a PostgreSQL parameter ($1).
	Number
	// Punct is an operator or punctuation.
	Punct
)

// Token is one token of SQL.
type Token struct {
	Kind Kind
	// Text is the token as it stands in the SQL, quotes included.
	Text string
	// Value is what the token stands for: an identifier's or a string's
	// text without its quotes and escapes, a word as the server reads it
	// (folded to lower case in PostgreSQL); Text for the others.
	Value string
}

// Is reports whether t is the punctuation or operator punct.
func (t Token) Is(punct string) bool { return t.Kind == Punct && t.Text == punct }

// IsWord reports whether t is the word w, in any case.
func (t Token) IsWord(w string) bool { return t.Kind == Word && strings.EqualFold(t.Text, w) }

// Scanner reads the tokens of a text one after the other. It allocates
// only for a token whose value differs from its text without quotes: an
// escape, a doubled quote, a PostgreSQL word with upper-case letters.
type Scanner struct {
	sx  Syntax
	s   string
	i   int
	err bool
}

// NewScanner returns a Scanner of s, SQL of syntax sx.
func NewScanner(s string, sx Syntax) Scanner { return Scanner{sx: sx, s: s} }

// Err reports whether the scanner stopped at SQL it cannot read: an
// unterminated quote or comment, a lone $ in PostgreSQL.
func (p *Scanner) Err() bool { return p.err }

// Peek returns the next token without taking it.
func (p *Scanner) Peek() Token {
	c := *p
	return c.Next()
}

// Next returns the next token; End once there are no more, or at SQL it
// cannot read.
func (p *Scanner) Next() Token {
	if !p.skip() {
		return p.fail()
	}
	s, i, sx := p.s, p.i, p.sx
	if i >= len(s) {
		return Token{}
	}
	c := s[i]
	switch {
	case c == '`' || c == '\'' || c == '"':
		kind := String
		if c == sx.Quote {
			kind = Ident
		}
		return p.quoted(i, kind, sx.mysql() && c != sx.Quote)
	case sx.PG && (c == 'E' || c == 'e') && i+1 < len(s) && s[i+1] == '\'':
		return p.quoted(i+1, String, true) // E'...': backslash escapes
	case sx.PG && c == '$':
		return p.dollar()
	case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
		j := i + 1
		for j < len(s) && (isWordByte(s[j]) || s[j] == '.') {
			j++
		}
		return p.take(Number, j, s[i:j])
	case isWordByte(c):
		j := i + 1
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		word := s[i:j]
		value := word
		if sx.PG {
			value = lowerASCII(word) // as PostgreSQL folds unquoted names
		}
		return p.take(Word, j, value)
	}
	n := 1
	for _, op := range []string{"<=>", "<=", ">=", "<>", "!=", "&&", "||", ":="} {
		if strings.HasPrefix(s[i:], op) {
			n = len(op)
			break
		}
	}
	return p.take(Punct, i+n, s[i:i+n])
}

// Split returns the tokens of s, SQL of syntax sx; false if it cannot
// read it all (see Scanner.Err).
func Split(s string, sx Syntax) ([]Token, bool) {
	p := NewScanner(s, sx)
	var toks []Token
	for t := p.Next(); t.Kind != End; t = p.Next() {
		toks = append(toks, t)
	}
	return toks, !p.err
}

// take returns the token of kind that ends at end, with value.
func (p *Scanner) take(kind Kind, end int, value string) Token {
	t := Token{Kind: kind, Text: p.s[p.i:end], Value: value}
	p.i = end
	return t
}

func (p *Scanner) fail() Token {
	p.err, p.i = true, len(p.s)
	return Token{}
}

// skip skips white space and comments: /* … */ (optimizer hints and
// version comments too; nested in PostgreSQL), -- to the end of the line
// (in MySQL only before white space or the end), # to the end of the line
// in MySQL. It reports false at a comment that does not end.
func (p *Scanner) skip() bool {
	s, sx := p.s, p.sx
	for p.i < len(s) {
		switch c := s[p.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			p.i++
		case c == '#' && sx.mysql(),
			strings.HasPrefix(s[p.i:], "--") && (!sx.mysql() || p.i+2 == len(s) || s[p.i+2] <= ' '):
			if n := strings.IndexByte(s[p.i:], '\n'); n >= 0 {
				p.i += n + 1
			} else {
				p.i = len(s)
			}
		case strings.HasPrefix(s[p.i:], "/*"):
			n, ok := blockComment(s[p.i:], sx.PG)
			if !ok {
				return false
			}
			p.i += n
		default:
			return true
		}
	}
	return true
}

// blockComment returns the length of the block comment at the start of
// s, whose inner block comments nest when nested is set.
func blockComment(s string, nested bool) (int, bool) {
	if !nested {
		n := strings.Index(s[2:], "*/")
		return n + 4, n >= 0
	}
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

// quoted reads the token of kind at the scanner's position, whose quote
// is at q: a doubled quote stands for itself, and so does a
// backslash-escaped character when backslash is set.
func (p *Scanner) quoted(q int, kind Kind, backslash bool) Token {
	s := p.s
	quote := s[q]
	plain := true // no escape nor doubled quote: the value is the text between the quotes
	for i := q + 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && backslash && i+1 < len(s):
			i++
			plain = false
		case s[i] == quote && i+1 < len(s) && s[i+1] == quote:
			i++
			plain = false
		case s[i] == quote:
			body := s[q+1 : i]
			if !plain {
				body = unquote(body, quote, backslash)
			}
			return p.take(kind, i+1, body)
		}
	}
	return p.fail()
}

// unquote returns the value of body, the text between the quotes of a
// token quoted with quote.
func unquote(body string, quote byte, backslash bool) string {
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		switch {
		case body[i] == '\\' && backslash && i+1 < len(body):
			i++
		case body[i] == quote && i+1 < len(body) && body[i+1] == quote:
			i++
		}
		b.WriteByte(body[i])
	}
	return b.String()
}

// dollar reads what starts with $ in PostgreSQL: a dollar-quoted string
// ($$text$$ or $tag$text$tag$), or a parameter ($1), taken for a value.
func (p *Scanner) dollar() Token {
	s := p.s[p.i:]
	j := 1
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j > 1 {
		return p.take(Number, p.i+j, s[:j])
	}
	for j < len(s) && s[j] != '$' && isWordByte(s[j]) {
		j++
	}
	if j == len(s) || s[j] != '$' {
		return p.fail() // a lone $ is not SQL
	}
	tag := s[:j+1]
	end := strings.Index(s[len(tag):], tag)
	if end < 0 {
		return p.fail()
	}
	return p.take(String, p.i+2*len(tag)+end, s[len(tag):len(tag)+end])
}

// lowerASCII folds the ASCII letters of s to lower case.
func lowerASCII(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }) < 0 {
		return s
	}
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
