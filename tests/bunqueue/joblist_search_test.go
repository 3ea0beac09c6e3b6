package bunqueue_test

import (
	"database/sql"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type searchArgs struct {
	S string `json:"s"`
}

func (searchArgs) Kind() string { return "bq_test_jobsearch" }

// searchIDs is the ids of the first page of a search of queue's jobs.
func searchIDs(t *testing.T, c *bunqueue.Client, queue, search string) []int64 {
	t.Helper()
	page, err := c.JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, Search: search})
	require.NoError(t, err, search)
	require.Empty(t, page.Cursor, "a range of a few jobs ends with the jobs")
	require.Positive(t, page.Searched)
	return recIDs(page.Jobs)
}

// JobListFilter.Search finds its text in the args and in the errors of
// waiting, retrying, completed and failed jobs, ASCII letters in either
// case, and %, _, quotes, backslashes and non-ASCII text as written.
func TestJobListSearch(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db, c, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		one := func(s string) int64 {
			return enqueueOne(t, c, db, searchArgs{S: s}, &bunqueue.EnqueueOpts{Queue: queue})
		}
		setErr := func(table, col string, id int64, text string) {
			_, err := db.NewRaw("UPDATE ? SET ? = ? WHERE ? = ?", bun.Ident(table), bun.Ident(col), text,
				bun.Ident(map[string]string{"bunqueue_jobs": "id", "bunqueue_failed_jobs": "job_id"}[table]), id).Exec(t.Context())
			require.NoError(t, err)
		}
		hello := one("Hello World")
		percent := one("100%_done")
		decoy := one("100 percent done") // what "0%_d" would match as a LIKE pattern
		quote := one(`it's "quoted"`)
		cafe := one("café")
		rocket := one("🚀 launch")
		retrying := one("r")
		dbtest.Exec(t, db, "UPDATE bunqueue_jobs SET attempts = 1 WHERE id = "+itoa(int(retrying)))
		setErr("bunqueue_jobs", "last_error", retrying, `Timeout at C:\temp\x`)
		completed := one("kept DoNe")
		dbtest.Exec(t, db, "UPDATE bunqueue_jobs SET state = 1, completed_at = "+nowSQL(db)+" WHERE id = "+itoa(int(completed)))
		failed := one("f")
		_, err := c.JobCancel(t.Context(), failed)
		require.NoError(t, err)
		setErr("bunqueue_failed_jobs", "error", failed, "Boom: disk FULL")

		for search, want := range map[string][]int64{
			"hello world":     {hello},
			"WORLD":           {hello},
			"0%_d":            {percent},
			"_":               {percent},
			"%":               {percent},
			"percent":         {decoy},
			"it's":            {quote},
			`\"quoted\"`:      {quote}, // args are JSON: a quote is escaped
			`"s":"it`:         {quote},
			`\temp`:           {retrying},
			`c:\TEMP\X`:       {retrying},
			"café":            {cafe},
			"CAF":             {cafe},
			"é":               {cafe},
			"🚀":               {rocket},
			"disk full":       {failed},
			"DONE":            {completed, decoy, percent},
			"no such text":    {},
			`{"s":"100%_done`: {percent},
		} {
			require.Equal(t, want, searchIDs(t, c, queue, search), "search %q", search)
		}
		if srv.Name == "mysql" {
			require.Equal(t, []int64{cafe}, searchIDs(t, c, queue, "CAFÉ"), "MySQL folds every letter")
		}
		require.Empty(t, searchIDs(t, c, queue, "cafe"), "no accent folding")
		// Args that are no JSON, with a NUL byte, written by hand: the
		// search does not fail; PostgreSQL does not search those args.
		nul := one("nul")
		_, err = db.NewRaw("UPDATE bunqueue_jobs SET args = ? WHERE id = ?", []byte("{\"s\":\"nul\x00Hello\"}"), nul).Exec(t.Context())
		require.NoError(t, err)
		want := []int64{nul, hello}
		if srv.Name == "postgres" {
			want = []int64{hello}
		}
		require.Equal(t, want, searchIDs(t, c, queue, "hello"))
		// With the states and kind filters.
		page, err := c.JobList(t.Context(), bunqueue.JobListFilter{Queue: queue, Kind: (searchArgs{}).Kind(), Search: "o",
			States: []bunqueue.JobState{bunqueue.JobStateFailed, bunqueue.JobStateRetrying, bunqueue.JobStateCompleted}})
		require.NoError(t, err)
		require.Equal(t, []int64{failed, completed, retrying}, recIDs(page.Jobs))
	})
}

// Bad values of JobListFilter.Search are errors that name the field.
func TestJobListSearchInvalid(t *testing.T) {
	db := dbtest.Open(t, 0)
	c := jobsTestClient(t, db, bunqueue.Config{})
	for _, s := range []string{strings.Repeat("x", bunqueue.JobListSearchMaxBytes+1), "\xff", "a\x00b"} {
		_, err := c.JobList(t.Context(), bunqueue.JobListFilter{Search: s})
		require.ErrorIs(t, err, bunqueue.ErrInvalidFilter, "%q", s)
		require.ErrorContains(t, err, "JobListFilter.Search")
	}
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	_, err := c.JobList(t.Context(), bunqueue.JobListFilter{Search: strings.Repeat("é", bunqueue.JobListSearchMaxBytes/2), Limit: 1})
	require.NoError(t, err, "JobListSearchMaxBytes bytes")
}

// fillSearch inserts n jobs of queue and kind, fast (INSERT ... SELECT):
// job i has args {"n":i}, "needle" in them where needle(i), is completed
// when i is odd; one in 5 moves to the failed jobs, one in 3000 with the
// error "failed NEEDLE". Jobs whose i%2200 == 2 have the last error
// "Needle in error".
func fillSearch(t *testing.T, db *bun.DB, queue, kind string, n int, needle string) {
	t.Helper()
	concat := func(parts ...string) string { return strings.Join(parts, " || ") }
	num := "CAST(i AS TEXT)"
	switch {
	case isPG(db):
		num = "CAST(i AS TEXT)"
	case dialectOf(db).System() == "sqlite":
	default:
		concat = func(parts ...string) string { return "CONCAT(" + strings.Join(parts, ", ") + ")" }
		num = "CAST(i AS CHAR)"
	}
	args := "CASE WHEN " + needle + " THEN " + concat(`'{"n":'`, num, `',"s":"a NeedLe"}'`) + " ELSE " + concat(`'{"n":'`, num, `'}'`) + " END"
	if isPG(db) {
		args = "convert_to(" + args + ", 'UTF8')"
	}
	dbtest.Exec(t, db, "INSERT INTO bunqueue_jobs (queue, kind, args, state, max_attempts, run_at, created_at, completed_at, last_error) "+
		"SELECT '"+queue+"', '"+kind+"', "+args+", i % 2, 3, "+nowSQL(db)+", "+nowSQL(db)+
		", CASE WHEN i % 2 = 1 THEN "+nowSQL(db)+" END, CASE WHEN i % 2200 = 2 THEN 'Needle in error' END FROM ("+dbtest.Series(n)+") AS s ORDER BY i")
	// The jobs' ids from the first, k, pick those that fail.
	first := int64(count(t, db, "SELECT MIN(id) FROM bunqueue_jobs WHERE queue = ?", queue))
	k := "(id - " + strconv.FormatInt(first, 10) + ")"
	dbtest.Exec(t, db, "INSERT INTO bunqueue_failed_jobs (job_id, queue, kind, args, priority, attempts, max_attempts, error, created_at, failed_at) "+
		"SELECT id, queue, kind, args, priority, 3, 3, CASE WHEN "+k+" % 3000 = 0 THEN 'failed NEEDLE' ELSE 'failed' END, created_at, "+nowSQL(db)+
		" FROM bunqueue_jobs WHERE queue = '"+queue+"' AND "+k+" % 5 = 0",
		"DELETE FROM bunqueue_jobs WHERE queue = '"+queue+"' AND "+k+" % 5 = 0")
}

// matching returns the jobs of all whose args or error contain needle,
// ASCII letters in either case.
func matching(all []bunqueue.JobRecord, needle string) []int64 {
	needle = strings.ToLower(needle)
	var out []int64
	for _, j := range all {
		text := string(j.Args) + "\x00" + j.LastError
		if j.Failed != nil {
			text += "\x00" + j.Failed.Error
		}
		if strings.Contains(strings.ToLower(text), needle) {
			out = append(out, j.ID)
		}
	}
	return out
}

// A search over more jobs than one page looks through: its pages, some
// short of the Limit or empty with a Cursor, list exactly the matching
// jobs, newest first, each once (walk), alone and with the other
// filters, through the failed jobs' merge.
func TestJobListSearchPages(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		_, _, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		db := srv.Open(t, 0)
		c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		kind := dbtest.Name("bq_test_search_kind")
		n := 2*bunqueue.JobListSearchRows + 5000
		fillSearch(t, db, queue, kind, n, "i % 397 = 0 OR (i > 12000 AND i < 12100)")
		all := walk(t, c, bunqueue.JobListFilter{Queue: queue, Limit: 1000})
		require.Len(t, all, n)

		var short int
		for _, f := range []bunqueue.JobListFilter{
			{Queue: queue, Search: "needle", Limit: 40},
			{Queue: queue, Search: "NEEDLE", Limit: 3},
			{Kind: kind, Search: "needle in", Limit: 100},
			{Queue: queue, Kind: kind, Search: "needle", Limit: 7, States: []bunqueue.JobState{bunqueue.JobStateFailed, bunqueue.JobStateCompleted}},
			{Queue: queue, Search: "needle", Limit: 25, States: []bunqueue.JobState{bunqueue.JobStatePending}},
			{Queue: queue, Search: "needle", Limit: 25, CreatedBefore: time.Now().Add(time.Hour)},
		} {
			var want []bunqueue.JobRecord
			for _, j := range all {
				if (len(f.States) == 0 || slices.Contains(f.States, j.State)) && j.Kind == kind {
					want = append(want, j)
				}
			}
			var got []int64
			for filter := f; ; {
				page, err := c.JobList(t.Context(), filter)
				require.NoError(t, err)
				require.LessOrEqual(t, page.Searched, bunqueue.JobListSearchRows)
				require.LessOrEqual(t, len(page.Jobs), f.Limit)
				if page.Cursor != "" && len(page.Jobs) < f.Limit {
					short++
					require.Equal(t, bunqueue.JobListSearchRows, page.Searched, "a short page with a cursor looked through a whole range")
				}
				got = append(got, recIDs(page.Jobs)...)
				if page.Cursor == "" {
					break
				}
				filter.Cursor = page.Cursor
			}
			require.NotEmpty(t, got)
			require.Equal(t, matching(want, f.Search), got, "%+v", f)
		}
		require.Positive(t, short, "some pages ended with their range")
		// The jobs at either side of the first page's range's end: each
		// found by its whole args, on the first page or the next.
		for _, j := range all[bunqueue.JobListSearchRows-2 : bunqueue.JobListSearchRows+2] {
			got := walk(t, c, bunqueue.JobListFilter{Queue: queue, Search: string(j.Args), Limit: 1})
			require.Equal(t, []int64{j.ID}, recIDs(got), "%s", j.Args)
		}
	})
}

// On a million jobs (BUNQUEUE_LONG=1), a page of a search that matches
// nothing looks through JobListSearchRows jobs and returns, with a
// Cursor; its time is logged, not asserted. (The statements' plans are
// those TestStartChecksJobListPlans requires, through the indexes.)
func TestJobListSearchMillion(t *testing.T) {
	if os.Getenv("BUNQUEUE_LONG") != "1" {
		t.Skip("BUNQUEUE_LONG=1 inserts a million jobs")
	}
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		_, _, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		db := srv.Open(t, 0)
		c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		kind := dbtest.Name("bq_test_search_kind")
		const n = 1_000_000
		start := time.Now()
		fillSearch(t, db, queue, kind, n, "i = 10")
		t.Logf("%s: %d jobs inserted in %s", srv.Name, n, time.Since(start).Round(time.Millisecond))
		analyze(t, db)
		for _, f := range []bunqueue.JobListFilter{{Queue: queue, Search: "no such text"}, {Search: "no such text"}, {Queue: queue, Search: "needle"}} {
			for range 3 {
				start := time.Now()
				page, err := c.JobList(t.Context(), f)
				took := time.Since(start)
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobListSearchRows, page.Searched)
				require.NotEmpty(t, page.Cursor)
				t.Logf("%s: a page of queue %q, search %q: %d jobs, %d looked through, in %s", srv.Name, f.Queue, f.Search, len(page.Jobs), page.Searched, took.Round(time.Microsecond))
			}
		}
	})
}

// Read in one snapshot (JobListTx in a REPEATABLE READ transaction), a
// search's pages list exactly the matches of that snapshot, once each,
// while another pool cancels matching jobs (they move to the failed
// jobs, keeping their ids), deletes some and enqueues new matches.
func TestJobListSearchSnapshot(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		if srv.Name == "sqlite" {
			t.Skip("one writer at a time: the test's writes would wait for the reading transaction")
		}
		_, _, queue := ctlSetup(t, srv, bunqueue.ModeLock)
		db := srv.Open(t, 0)
		c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		other := srv.Open(t, 0)
		oc := jobsTestClient(t, other, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		kind := dbtest.Name("bq_test_search_kind")
		fillSearch(t, db, queue, kind, 2*bunqueue.JobListSearchRows+5000, "i % 97 = 0")

		tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		all := walkTx(t, c, tx, bunqueue.JobListFilter{Queue: queue, Limit: 1000})
		want := matching(all, "needle")
		require.Greater(t, len(want), 100)

		var cancelled, deleted int
		for _, j := range all {
			if j.State == bunqueue.JobStateFailed || !strings.Contains(string(j.Args), "NeedLe") {
				continue
			}
			var err error
			if (cancelled+deleted)%2 == 0 && j.State != bunqueue.JobStateCompleted {
				_, err = oc.JobCancel(t.Context(), j.ID)
				cancelled++
			} else {
				err = oc.JobDelete(t.Context(), j.ID)
				deleted++
			}
			require.NoError(t, err)
		}
		for range 20 {
			enqueueOne(t, oc, other, searchArgs{S: "late needle"}, &bunqueue.EnqueueOpts{Queue: queue})
		}
		require.Positive(t, cancelled)
		require.Positive(t, deleted)

		got := walkTx(t, c, tx, bunqueue.JobListFilter{Queue: queue, Search: "needle", Limit: 7})
		require.Equal(t, want, recIDs(got), "the snapshot's matches")
		require.NoError(t, tx.Commit())
		now := walk(t, c, bunqueue.JobListFilter{Queue: queue, Search: "needle", Limit: 7})
		require.NotEqual(t, want, recIDs(now), "outside the snapshot, the changes show")
	})
}
