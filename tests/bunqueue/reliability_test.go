package bunqueue_test

// The reliability suite: real kills, injected faults and bad input. Each
// scenario reports what the README's "Reliability" table shows: items
// enqueued, processed, lost, run by two workers at once, database effects
// committed twice, and the kills, faults and bad inputs it survived.
//
// The quick part runs with the other tests. The long part (20,000 items
// per SIGKILL run, 200+ server-side KILLs per mode, and a restart of the
// database server in the middle of a run, which stops the server for
// everyone who uses it: MariaDB, or PostgreSQL with
// BUNQUEUE_TEST_SERVER=postgres) runs only with BUNQUEUE_RELIABILITY_LONG=1:
//
//	BUNQUEUE_RELIABILITY_LONG=1 BUNQUEUE_RELIABILITY_REPORT=/tmp/rel.md \
//	    go test -run '^TestReliability' -count=1 -timeout 60m -v .
//
// In the long part the tests run one at a time (not t.Parallel), so that
// the restart does not cut the others' runs and the figures are not
// skewed by each other. BUNQUEUE_RELIABILITY_REPORT appends each
// scenario's row, as Markdown, to that file.
//
// The scenarios: reliability_sigkill_test.go (1: worker processes killed
// with SIGKILL), reliability_serverkill_test.go (2: KILL of worker
// connections on the server), reliability_fault_test.go (3: faults
// injected at every SQL step through tests/faultdriver; 8: commit
// outcome unknown), reliability_restart_test.go (4: the server restarted),
// reliability_stop_test.go (5: Stop under load), reliability_badinput_test.go
// (6: bad input), reliability_tz_test.go (7: time zones and a DST
// change), reliability_galera_test.go (9: a Galera cluster, one client
// per node or all on one; it needs BUNQUEUE_GALERA_DSNS, or starts the
// cluster with scripts/galera.sh in the long part);
// reliability_workload_test.go holds the workload most of them share.
//
// How a violation shows:
//   - lost: an item still waiting (or with no effect, or failed) after
//     the run has drained;
//   - run concurrently: every handler run records when it started and
//     ended (in memory, or in a file per worker process, written outside
//     any transaction); two runs of one item that overlap are two workers
//     on it at once. A run in a process killed with SIGKILL ends, at the
//     latest, when the kill was sent;
//   - committed twice: every handler inserts an effect row (no unique
//     key) through the item's transaction; an item with two effect rows
//     had its effect committed twice.
// TestReliabilityDetectorsCatchViolations shows the last two catching a
// real violation (a lease-mode job that outlives its lease).

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

const (
	relLongEnv   = "BUNQUEUE_RELIABILITY_LONG"   // "1": run the long part
	relReportEnv = "BUNQUEUE_RELIABILITY_REPORT" // append each scenario's Markdown row to this file
)

// relLong reports whether the long part runs.
func relLong() bool { return os.Getenv(relLongEnv) == "1" }

// relSize returns quick or long, by the part that runs.
func relSize[T any](quick, long T) T {
	if relLong() {
		return long
	}
	return quick
}

// relParallel marks a quick-part test parallel; the long part runs its
// tests one at a time.
func relParallel(t *testing.T) {
	if !relLong() {
		t.Parallel()
	}
}

// relToken returns a random hex string of n bytes.
func relToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// relReport is one scenario's figures.
type relReport struct {
	Scenario   string
	Mode       string // "any table", "jobs, lock mode", "jobs, lease mode", or ""
	Enqueued   int
	Processed  int
	Lost       int
	Concurrent int // runs of one item that overlapped while both held it
	Twice      int // items whose effect committed more than once
	TwiceOK    bool
	Kills      int
	Faults     int
	BadInputs  int
	Duration   time.Duration
	Notes      []string
}

func (r *relReport) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// log writes the report to the test log and, with BUNQUEUE_RELIABILITY_REPORT
// set, appends its row to that file.
func (r *relReport) log(t *testing.T) {
	t.Helper()
	twice := strconv.Itoa(r.Twice)
	if r.TwiceOK {
		twice += " (allowed)"
	}
	t.Logf("reliability: %s [%s]: enqueued %d, processed %d, lost %d, concurrent %d, effects twice %s, kills %d, faults %d, bad inputs %d, in %s; %s",
		r.Scenario, r.Mode, r.Enqueued, r.Processed, r.Lost, r.Concurrent, twice, r.Kills, r.Faults, r.BadInputs,
		r.Duration.Round(100*time.Millisecond), strings.Join(r.Notes, "; "))
	path := os.Getenv(relReportEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	part := "quick"
	if relLong() {
		part = "long"
	}
	_, err = fmt.Fprintf(f, "| %s | %s | %s | %d | %d | %d | %d | %s | %d | %d | %d | %s | %s |\n",
		r.Scenario, r.Mode, part, r.Enqueued, r.Processed, r.Lost, r.Concurrent, twice, r.Kills, r.Faults, r.BadInputs,
		r.Duration.Round(time.Second), strings.Join(r.Notes, "; "))
	require.NoError(t, err)
}

// relRun is one run of a handler on an item: from its start to its
// return, in Unix nanoseconds.
type relRun struct {
	Item       int64
	Start, End int64 // End 0: never returned (its process was killed)
	Conn       int64 // the server connection of its transaction, if known
	Who        string
}

// relOverlaps counts the runs of an item that started while an earlier
// run of it still held it: held(r) is when run r stopped holding its item
// (by default, when it returned). It returns up to 5 examples.
func relOverlaps(runs []relRun, held func(relRun) int64) (int, []string) {
	if held == nil {
		held = func(r relRun) int64 { return r.End }
	}
	by := map[int64][]relRun{}
	for _, r := range runs {
		by[r.Item] = append(by[r.Item], r)
	}
	n := 0
	var examples []string
	for item, rs := range by {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		var until int64
		var holder relRun
		for i, r := range rs {
			if i > 0 && r.Start < until {
				n++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("item %d: %s started %s before %s stopped holding it",
						item, r.Who, time.Duration(until-r.Start), holder.Who))
				}
			}
			if h := held(r); h > until {
				until, holder = h, r
			}
		}
	}
	return n, examples
}

// relRecorder records the runs of the handlers of this process.
type relRecorder struct {
	mu   sync.Mutex
	runs []relRun
}

// begin records the start of a run of item and returns the function that
// records its end.
func (r *relRecorder) begin(item, conn int64, who string) func() {
	r.mu.Lock()
	i := len(r.runs)
	r.runs = append(r.runs, relRun{Item: item, Start: time.Now().UnixNano(), Conn: conn, Who: who})
	r.mu.Unlock()
	return func() {
		now := time.Now().UnixNano()
		r.mu.Lock()
		r.runs[i].End = now
		r.mu.Unlock()
	}
}

func (r *relRecorder) all() []relRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]relRun(nil), r.runs...)
}

// relEventFile records the runs of a worker process in a file, one line
// per start ("S item conn ns") and end ("E item ns"). Each line is one
// write(2): a line written before the process is killed is in the file.
type relEventFile struct {
	mu sync.Mutex
	f  *os.File
}

func (e *relEventFile) begin(item, conn int64) func() {
	e.write(fmt.Sprintf("S %d %d %d\n", item, conn, time.Now().UnixNano()))
	return func() { e.write(fmt.Sprintf("E %d %d\n", item, time.Now().UnixNano())) }
}

func (e *relEventFile) write(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.f.WriteString(line)
}

// relReadEvents reads the runs recorded in an event file. A run without
// its end was cut by the process's death: it ends at killed (the time the
// kill was sent) and is counted in cut, or is counted in unfinished if
// the process was not killed.
func relReadEvents(path, who string, killed int64) (runs []relRun, unfinished, cut int, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	open := map[int64][]int{} // item → indexes of its runs not yet ended
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 4 && fields[0] == "S":
			item, _ := strconv.ParseInt(fields[1], 10, 64)
			conn, _ := strconv.ParseInt(fields[2], 10, 64)
			ns, _ := strconv.ParseInt(fields[3], 10, 64)
			open[item] = append(open[item], len(runs))
			runs = append(runs, relRun{Item: item, Start: ns, Conn: conn, Who: who})
		case len(fields) == 3 && fields[0] == "E":
			item, _ := strconv.ParseInt(fields[1], 10, 64)
			ns, _ := strconv.ParseInt(fields[2], 10, 64)
			if idx := open[item]; len(idx) > 0 {
				runs[idx[len(idx)-1]].End = ns
				open[item] = idx[:len(idx)-1]
			}
		default:
			// A line cut short by the kill.
		}
	}
	for _, idx := range open {
		for _, i := range idx {
			if killed > 0 {
				runs[i].End = max(killed, runs[i].Start)
				cut++
			} else {
				unfinished++
				runs[i].End = runs[i].Start
			}
		}
	}
	return runs, unfinished, cut, sc.Err()
}

// relEffects counts, in an effects table (one row per committed effect,
// item column), the distinct items and those with more than one row.
func relEffects(t *testing.T, db bun.IDB, table string) (items, twice int) {
	t.Helper()
	items = count(t, db, "SELECT COUNT(DISTINCT item) FROM "+table)
	twice = count(t, db, "SELECT COUNT(*) FROM (SELECT item FROM "+table+" GROUP BY item HAVING COUNT(*) > 1) d")
	return items, twice
}

// relEffectsTable creates a fresh effects table, dropped when the test
// ends.
func relEffectsTable(t *testing.T, db *bun.DB, prefix string) string {
	t.Helper()
	name := dbtest.Name(prefix)
	createTable(t, db, name, "id BIGINT AUTO_INCREMENT PRIMARY KEY, item BIGINT NOT NULL, token CHAR(16) NOT NULL DEFAULT '', "+
		"who VARCHAR(32) NOT NULL DEFAULT '', INDEX (item)")
	return name
}

// relWaitFor polls cond every 100 ms until it holds or wait runs out; it
// reports whether it held.
func relWaitFor(wait time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(wait)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// relSleep waits d or until ctx ends.
func relSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The detectors themselves: overlapping runs are found, including a run
// cut by a kill, and runs that follow each other are not.
func TestReliabilityOverlapDetector(t *testing.T) {
	t.Parallel()
	runs := []relRun{
		{Item: 1, Start: 10, End: 20, Who: "a"},
		{Item: 1, Start: 20, End: 30, Who: "b"}, // starts as a ends: fine
		{Item: 2, Start: 10, End: 50, Who: "c"},
		{Item: 2, Start: 40, End: 60, Who: "d"}, // overlaps c
		{Item: 3, Start: 10, End: 100, Who: "e"},
		{Item: 3, Start: 20, End: 30, Who: "f"}, // inside e
		{Item: 3, Start: 40, End: 45, Who: "g"}, // inside e too
	}
	n, ex := relOverlaps(runs, nil)
	require.Equal(t, 3, n, ex)
	// e stopped holding item 3 at 15 (its connection was killed then):
	// f and g came after.
	n, _ = relOverlaps(runs, func(r relRun) int64 {
		if r.Who == "e" {
			return 15
		}
		return r.End
	})
	require.Equal(t, 1, n)

	dir := t.TempDir()
	path := dir + "/events"
	require.NoError(t, os.WriteFile(path, []byte("S 7 0 100\nE 7 150\nS 8 0 120\nS 7 0 200\nE 7 250\nS 9 0"), 0o644))
	got, unfinished, cut, err := relReadEvents(path, "p", 180)
	require.NoError(t, err)
	require.Zero(t, unfinished)
	require.Equal(t, 1, cut)
	require.Equal(t, []relRun{
		{Item: 7, Start: 100, End: 150, Who: "p"},
		{Item: 8, Start: 120, End: 180, Who: "p"}, // cut by the kill sent at 180
		{Item: 7, Start: 200, End: 250, Who: "p"},
	}, got, "a line cut short by the kill is skipped")
	_, unfinished, _, err = relReadEvents(path, "p", 0)
	require.NoError(t, err)
	require.Equal(t, 1, unfinished, "a run that never ended in a process that was not killed")
}
