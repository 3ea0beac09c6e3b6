package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// prettyJSON returns raw indented by two spaces, its keys in their order,
// its numbers as written, and its strings without the \u003c-style
// escapes of Go's encoder (html/template escapes the page). It returns
// an error for what is not one JSON value; the page then shows the bytes
// as they are.
func prettyJSON(raw []byte) (string, error) {
	p := printer{dec: json.NewDecoder(bytes.NewReader(raw))}
	p.dec.UseNumber()
	if err := p.print(); err != nil {
		return "", err
	}
	return p.out.String(), nil
}

// printer writes the tokens of dec, indented, to out.
type printer struct {
	dec    *json.Decoder
	out    strings.Builder
	stack  []level
	values int // values at the top level
}

// level is an object or array being printed.
type level struct {
	object bool
	n      int  // members or elements written
	key    bool // an object's key was written, its value is next
}

func (p *printer) print() error {
	for {
		tok, err := p.dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := p.token(tok); err != nil {
			return err
		}
	}
	if p.values != 1 || len(p.stack) != 0 {
		return errors.New("not one JSON value")
	}
	return nil
}

// token writes tok with what comes before it: a comma, a new line, the
// indent.
func (p *printer) token(tok json.Token) error {
	d, delim := tok.(json.Delim)
	if delim && (d == '}' || d == ']') {
		top := p.stack[len(p.stack)-1]
		p.stack = p.stack[:len(p.stack)-1]
		if top.n > 0 {
			p.newline()
		}
		p.out.WriteByte(byte(d))
		return nil
	}
	if len(p.stack) == 0 {
		p.values++
	} else if top := &p.stack[len(p.stack)-1]; top.object && !top.key {
		p.next(top)
		top.key = true
		if err := p.scalar(tok); err != nil {
			return err
		}
		p.out.WriteString(": ")
		return nil
	} else if top.object {
		top.key = false
	} else {
		p.next(top)
	}
	if delim {
		p.out.WriteByte(byte(d))
		p.stack = append(p.stack, level{object: d == '{'})
		return nil
	}
	return p.scalar(tok)
}

// next starts the next member or element of top.
func (p *printer) next(top *level) {
	if top.n > 0 {
		p.out.WriteByte(',')
	}
	top.n++
	p.newline()
}

func (p *printer) newline() {
	p.out.WriteByte('\n')
	p.out.WriteString(strings.Repeat("  ", len(p.stack)))
}

// scalar writes a string, number, boolean or null, without HTML escapes.
func (p *printer) scalar(tok json.Token) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tok); err != nil {
		return err
	}
	p.out.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return nil
}

// prettyMetadata returns metadata as indented JSON, its keys sorted, or
// "" when there is none.
func prettyMetadata(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(m) // a map of strings always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
