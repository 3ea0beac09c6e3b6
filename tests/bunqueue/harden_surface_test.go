package bunqueue_test

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// readFile returns the text of a file of the repository.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// readmeGo returns the README's Go code blocks.
func readmeGo(t *testing.T) []string {
	t.Helper()
	return regexp.MustCompile("(?s)```go\n(.*?)```").FindAllString(readFile(t, "../../README.md"), -1)
}

// docGo returns the package doc and the code blocks in it.
func docGo(t *testing.T) (doc string, code []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	doc = f.Doc.Text()
	var block []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "\t") {
			block = append(block, line)
			continue
		}
		if block != nil && line != "" {
			code = append(code, strings.Join(block, "\n"))
			block = nil
		}
	}
	return doc, code
}

// The README and the package doc open with the servers bunqueue runs on:
// those sqldialect.For accepts.
func TestDocsNameEveryServer(t *testing.T) {
	t.Parallel()
	readme := readFile(t, "../../README.md")
	_, intro, _ := strings.Cut(readme, "\n\n")
	intro, _, _ = strings.Cut(intro, "\n\n")
	doc, _ := docGo(t)
	docIntro, _, _ := strings.Cut(doc, "\n\n")
	for what, text := range map[string]string{"README": intro, "package doc": docIntro} {
		text = strings.Join(strings.Fields(text), " ")
		for _, server := range []string{"MySQL 8", "MariaDB", "PostgreSQL", "SQLite"} {
			require.Contains(t, text, server, "%s: %s", what, text)
		}
	}
}

// The Go code in the README and the package doc runs on every server: it
// compares and stores times through bunqueue.Now and NowPlus, not
// MySQL's UTC_TIMESTAMP, INTERVAL or POW.
func TestDocsCodeIsPortable(t *testing.T) {
	t.Parallel()
	_, docCode := docGo(t)
	mysqlOnly := regexp.MustCompile(`UTC_TIMESTAMP|INTERVAL|POW\(|NOW\(\)`)
	for what, blocks := range map[string][]string{"README": readmeGo(t), "package doc": docCode} {
		require.NotEmpty(t, blocks, what)
		for _, b := range blocks {
			require.NotRegexp(t, mysqlOnly, b, "%s: MySQL-only SQL in\n%s", what, b)
		}
	}
}

// The README's recordFailure is the one examples/emails runs, on every
// server, in its tests.
func TestDocsRecordFailureIsTheExample(t *testing.T) {
	t.Parallel()
	fn := regexp.MustCompile(`(?s)func recordFailure\(.*?\n}\n`)
	example := fn.FindString(readFile(t, "../../examples/emails/main.go"))
	require.NotEmpty(t, example)
	var shown string
	for _, b := range readmeGo(t) {
		if s := fn.FindString(b); s != "" {
			shown = s
		}
	}
	require.NotEmpty(t, shown, "the README shows a recordFailure")
	require.Equal(t, example, strings.ReplaceAll(shown, "    ", "\t"), "the README's recordFailure is examples/emails'")
}

// sayOnce requires err's message to say "bunqueue:" once, and to name the
// queue, if one is given, once.
func sayOnce(t *testing.T, err error, queue string) {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	require.Equal(t, 1, strings.Count(msg, "bunqueue:"), "one bunqueue: in %q", msg)
	if queue != "" {
		require.Equal(t, 1, strings.Count(msg, queue), "the queue once in %q", msg)
	}
}

type errsItem struct {
	bun.BaseModel `bun:"table:bq_errs_item"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// An error says "bunqueue:" once, and names its queue once: Start's check
// of a queue's table, the jobs API on a database not migrated, a handler's
// panic or cancel as ProcessNext returns it, a queue's depth in Stats.
func TestErrorsSayBunqueueOnce(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := emptyDB(t, srv)
		missing := bunqueue.NewQueue("nt_queue", func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
			func(ctx context.Context, tx bun.Tx, it *struct {
				bun.BaseModel `bun:"table:no_such_table"`
				ID            int64 `bun:",pk"`
				Done          bool
			}) error {
				return nil
			}, nil)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, c.Add(missing))
		err = c.Start(t.Context())
		sayOnce(t, err, `"nt_queue"`)
		require.Contains(t, err.Error(), "no_such_table")
		_, err = c.Stats(t.Context())
		sayOnce(t, err, "nt_queue")

		_, err = c.Enqueue(t.Context(), db, srvJobArgs{N: 1}, nil)
		sayOnce(t, err, "")
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)
		_, err = c.FailedJobs(t.Context(), bunqueue.FailedJobsFilter{})
		sayOnce(t, err, "")
		require.ErrorIs(t, err, bunqueue.ErrNotMigrated)

		srvTable(t, db, "bq_errs_item", "id BIGINT NOT NULL PRIMARY KEY, done BOOLEAN NOT NULL DEFAULT FALSE")
		dbtest.Exec(t, db, "INSERT INTO bq_errs_item (id) VALUES (1), (2)")
		failing := bunqueue.NewQueue("panics_queue", func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
			func(ctx context.Context, tx bun.Tx, it *errsItem) error {
				if it.ID == 1 {
					panic("kaboom")
				}
				return bunqueue.Cancel(errors.New("no"))
			}, nil)
		c2, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, c2.Add(failing))
		for range 2 {
			_, err = failing.ProcessNext(t.Context())
			sayOnce(t, err, `"panics_queue"`)
			require.Regexp(t, `row id=\d: (handler panicked: kaboom|job cancelled: no)`, err.Error())
		}
	})
}
