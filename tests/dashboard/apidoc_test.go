package dashboard_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/dashboard"
)

// apiDoc is the page whose curl examples TestAPIDocExamples runs, and
// apiSection the heading of its section that holds them.
const (
	apiDoc     = "../../docs/dashboard.md"
	apiSection = "## Scripts: the JSON API"
)

// docExample is one example of the doc: a curl command, the status it
// answers and its answer, JSON.
type docExample struct {
	line   int // of the curl command in the doc
	curl   string
	status int
	reply  string
}

// docExamples reads the examples of the doc's API section: each is a
// fenced sh block that begins with curl, then text that says "answers
// NNN", then a fenced json block. It also returns the section's text.
func docExamples(t *testing.T, path string) ([]docExample, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n"+apiSection+"\n")
	require.GreaterOrEqual(t, start, 0, "%s has the section %q", path, apiSection)
	section := doc[start+1:]
	if end := strings.Index(section[len(apiSection):], "\n## "); end >= 0 {
		section = section[:len(apiSection)+end+1]
	}
	firstLine := strings.Count(doc[:start+1], "\n") + 1

	type block struct {
		lang, body, before string
		line               int
	}
	var blocks []block
	var cur *block
	var text strings.Builder
	sc := bufio.NewScanner(strings.NewReader(section))
	for n := firstLine; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimPrefix(line, "```"), before: text.String(), line: n + 1}
			text.Reset()
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		default:
			text.WriteString(line + "\n")
		}
	}
	require.Nil(t, cur, "a fenced block of the section is not closed")

	var out []docExample
	answers := regexp.MustCompile(`answers (\d{3})\b`)
	for i, bl := range blocks {
		if bl.lang != "sh" || !strings.HasPrefix(bl.body, "curl ") {
			continue
		}
		require.Less(t, i+1, len(blocks), "line %d: a curl example is followed by its answer, a json block", bl.line)
		next := blocks[i+1]
		require.Equal(t, "json", next.lang, "line %d: a curl example is followed by its answer, a json block", bl.line)
		m := answers.FindAllStringSubmatch(next.before, -1)
		require.Len(t, m, 1, "line %d: the text between a curl example and its answer says \"answers NNN\" once: %q", bl.line, next.before)
		status, _ := strconv.Atoi(m[0][1])
		out = append(out, docExample{line: bl.line, curl: bl.body, status: status, reply: next.body})
	}
	return out, section
}

// shellWords splits a command line as sh does for the subset the doc's
// examples use: words, single and double quotes, backslash-newline, and
// $NAME (also inside double quotes) expanded from vars.
func shellWords(line string, vars map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	expand := func(s string, i int) (int, error) {
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		v, ok := vars[s[i+1:j]]
		if !ok {
			return 0, fmt.Errorf("the variable $%s is not one the test sets", s[i+1:j])
		}
		w.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line) && line[i+1] == '\n':
			i += 2
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("an unclosed ' in %q", line)
			}
			w.WriteString(line[i+1 : i+1+end])
			inWord, i = true, i+end+2
		case c == '"':
			i++
			for i < len(line) && line[i] != '"' {
				switch {
				case line[i] == '$':
					var err error
					if i, err = expand(line, i); err != nil {
						return nil, err
					}
				case line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`$"\`, line[i+1]) >= 0:
					w.WriteByte(line[i+1])
					i += 2
				default:
					w.WriteByte(line[i])
					i++
				}
			}
			if i == len(line) {
				return nil, fmt.Errorf(`an unclosed " in %q`, line)
			}
			inWord, i = true, i+1
		case c == '$':
			var err error
			if i, err = expand(line, i); err != nil {
				return nil, err
			}
			inWord = true
		case strings.IndexByte("|;&<>`(){}*?", c) >= 0:
			return nil, fmt.Errorf("the test runs one curl command: %q is beyond it", c)
		default:
			w.WriteByte(c)
			inWord, i = true, i+1
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// curlRequest returns the request a curl command line makes: curl's
// options -s, -S, -H (--header) and -d (--data, --data-urlencode), and
// one address. Any other option is an error, so that an example the test
// cannot run the same way fails it.
func curlRequest(words []string) (*http.Request, error) {
	if len(words) == 0 || words[0] != "curl" {
		return nil, fmt.Errorf("not a curl command: %q", words)
	}
	header := http.Header{}
	var data []string
	target := ""
	for i := 1; i < len(words); i++ {
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s needs a value", words[i])
			}
			i++
			return words[i], nil
		}
		switch w := words[i]; w {
		case "-s", "-S", "-sS", "-Ss", "--silent", "--show-error":
		case "-H", "--header":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			name, value, ok := strings.Cut(v, ":")
			if !ok {
				return nil, fmt.Errorf("the header %q has no colon", v)
			}
			header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		case "-d", "--data":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			data = append(data, v)
		case "--data-urlencode":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			name, value, _ := strings.Cut(v, "=")
			data = append(data, name+"="+url.QueryEscape(value))
		default:
			if strings.HasPrefix(w, "-") || target != "" {
				return nil, fmt.Errorf("the test does not run curl's %q: teach curlRequest it, or write the example without it", w)
			}
			target = w
		}
	}
	method, body := http.MethodGet, io.Reader(nil)
	if data != nil {
		method, body = http.MethodPost, strings.NewReader(strings.Join(data, "&"))
		header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl -d
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header = header
	return req, nil
}

// matchDoc compares got, an answer, with want, the doc's: the same keys
// in every object; arrays as long, or the doc's shorter (a shortened
// sample), compared element by element; the same booleans, nulls and
// strings, but any number and any time for a number or a time (RFC
// 3339), which vary from run to run; a string that ends in "…" is a
// prefix.
func matchDoc(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an object in the doc, %T in the answer", path, got)}
		}
		var diffs []string
		for k := range g {
			if _, ok := w[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the answer, not in the doc", path, k))
			}
		}
		for k, v := range w {
			if _, ok := g[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the doc, not in the answer", path, k))
				continue
			}
			diffs = append(diffs, matchDoc(path+"."+k, v, g[k])...)
		}
		slices.Sort(diffs)
		return diffs
	case []any:
		g, ok := got.([]any)
		switch {
		case !ok:
			return []string{fmt.Sprintf("%s: an array in the doc, %T in the answer", path, got)}
		case len(w) > len(g), len(w) == 0 && len(g) > 0:
			return []string{fmt.Sprintf("%s: %d elements in the doc, %d in the answer", path, len(w), len(g))}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, matchDoc(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	case string:
		g, ok := got.(string)
		_, isTime := time.Parse(time.RFC3339Nano, w)
		switch {
		case !ok:
			return []string{fmt.Sprintf("%s: a string in the doc, %T in the answer", path, got)}
		case isTime == nil:
			if _, err := time.Parse(time.RFC3339Nano, g); err != nil {
				return []string{fmt.Sprintf("%s: a time in the doc, %q in the answer", path, g)}
			}
		case strings.HasSuffix(w, "…"):
			if !strings.HasPrefix(g, strings.TrimSuffix(w, "…")) {
				return []string{fmt.Sprintf("%s: %q in the doc, %q in the answer", path, w, g)}
			}
		case w != g:
			return []string{fmt.Sprintf("%s: %q in the doc, %q in the answer", path, w, g)}
		}
	case float64:
		if _, ok := got.(float64); !ok {
			return []string{fmt.Sprintf("%s: a number in the doc, %v in the answer", path, got)}
		}
	default: // bool, nil
		if want != got {
			return []string{fmt.Sprintf("%s: %v in the doc, %v in the answer", path, want, got)}
		}
	}
	return nil
}

// allKeys puts every object key of v, at any depth, in into.
func allKeys(v any, into map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			into[k] = true
			allKeys(e, into)
		}
	case []any:
		for _, e := range v {
			allKeys(e, into)
		}
	}
}

// learnNewIDs adds to words, for each new_job_id of want, the doc's
// answer, the id the dashboard answered in its place in got: the later
// examples name the job a retry made by the doc's id.
func learnNewIDs(want, got any, words map[string]string) {
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		for k, v := range w {
			if n, ok := v.(float64); ok && k == "new_job_id" {
				if m, ok := g[k].(float64); ok {
					words[fmt.Sprint(int64(n))] = fmt.Sprint(int64(m))
				}
				continue
			}
			learnNewIDs(v, g[k], words)
		}
	case []any:
		g, _ := got.([]any)
		for i := range min(len(w), len(g)) {
			learnNewIDs(w[i], g[i], words)
		}
	}
}

// replaceWords replaces each whole word of s that is a key of words by
// its value.
func replaceWords(s string, words map[string]string) string {
	for from, to := range words {
		s = regexp.MustCompile(`\b`+regexp.QuoteMeta(from)+`\b`).ReplaceAllString(s, to)
	}
	return s
}

// The curl examples of docs/dashboard.md's API section, run against a
// dashboard mounted as the doc says, in their order, on a jobs queue
// and failed jobs made as the doc's: each answers the status the doc
// says, with the fields the doc shows and no other (see matchDoc), and
// every field of every answer is named in the section. Together they
// cover every address that answers JSON. The doc's queue name and ids
// stand for the test's own.
func TestAPIDocExamples(t *testing.T) {
	t.Parallel()
	d := setupDoc(t)
	examples, section := docExamples(t, apiDoc)
	require.GreaterOrEqual(t, len(examples), 10, "the section's examples")

	vars := map[string]string{"DASHBOARD": d.srv.URL + "/bunqueue", "TOKEN": d.token}
	seen := map[string]bool{}
	for _, ex := range examples {
		where := fmt.Sprintf("%s:%d", apiDoc, ex.line)
		words, err := shellWords(replaceWords(ex.curl, d.words), vars)
		require.NoError(t, err, where)
		req, err := curlRequest(words)
		require.NoError(t, err, where)
		seen[req.Method+" "+strings.TrimPrefix(req.URL.Path, "/bunqueue/")] = true
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err, where)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, ex.status, res.StatusCode, "%s: the status; the answer: %s", where, body)
		require.Equal(t, "application/json; charset=utf-8", res.Header.Get("Content-Type"), where)
		require.NotContains(t, string(body), d.token, "%s: the answer never holds the token", where)

		var want, got any
		require.NoError(t, json.Unmarshal([]byte(replaceWords(ex.reply, d.words)), &want), "%s: the doc's answer is JSON", where)
		require.NoError(t, json.Unmarshal(body, &got), where)
		require.Empty(t, matchDoc("answer", want, got), "%s: the doc's answer and the dashboard's differ; the dashboard's:\n%s", where, body)
		learnNewIDs(want, got, d.words)
		keys := map[string]bool{}
		allKeys(got, keys)
		for k := range keys {
			require.Contains(t, section, "`"+k+"`", "%s: the section names the field %q of the answer", where, k)
		}
	}
	for _, endpoint := range []string{"GET data.json", "POST pause", "POST resume", "POST retry", "POST delete", "POST job-action", "POST retry-row"} {
		require.True(t, seen[endpoint], "the section has an example of %s", endpoint)
	}
}

// docFixture is the dashboard the doc's examples run against, and the
// test's own values of the doc's queue name and ids.
type docFixture struct {
	srv   *httptest.Server
	token string
	words map[string]string
}

// docToken is the Options.APIToken of the doc's examples.
const docToken = "9c1b6f8e2d4a7b3c5e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"

func setupDoc(t *testing.T) *docFixture {
	t.Helper()
	f := setupAPI(t)
	h := dashboard.New(f.client, f.options(dashboard.Options{AllowActions: true, APIToken: docToken}))
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", http.StripPrefix("/bunqueue", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &docFixture{srv: srv, token: docToken, words: map[string]string{
		"emails": f.queue, "orders": f.orders, "shop_orders": dashTable,
		"9001": fmt.Sprint(f.failed[0]), "9002": fmt.Sprint(f.failed[1]),
		"4101": fmt.Sprint(f.scheduled), "4102": fmt.Sprint(f.pending),
	}}
}
