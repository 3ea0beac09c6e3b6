package bunqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// Scenarios 3 and 8: faults injected through tests/faultdriver, a
// wrapping database/sql driver used only by tests.

var (
	relOpExec  = []faultdriver.Op{faultdriver.OpExec}
	relOpQuery = []faultdriver.Op{faultdriver.OpQuery}
)

func relIsOp(op faultdriver.Op) func(faultdriver.Stmt) bool {
	return func(s faultdriver.Stmt) bool { return s.Op == op }
}

// relQuoted is name as bun quotes an identifier on the server the tests
// run on.
func relQuoted(name string) string {
	if dbtest.IsPostgres() {
		return `"` + name + `"`
	}
	return "`" + name + "`"
}

func relPrefix(ops []faultdriver.Op, prefixes ...string) func(faultdriver.Stmt) bool {
	return func(s faultdriver.Stmt) bool {
		if !faultdriver.Contains(ops)(s) {
			return false
		}
		for _, p := range prefixes {
			if strings.HasPrefix(s.SQL, p) {
				return true
			}
		}
		return false
	}
}

// relStepRules are the rules of scenario 3 for the workload's mode: every
// SQL step of a claim, a handler and a completion gets each of its faults
// in turn, every n-th time it runs.
func relStepRules(w *relWorkload) []faultdriver.Rule {
	all := faultdriver.AllFaults
	conn := []faultdriver.Fault{faultdriver.DropBefore, faultdriver.DropAfter}
	rules := []faultdriver.Rule{
		{Step: "begin", Match: relIsOp(faultdriver.OpBegin), Faults: conn, Every: 20},
		{Step: "commit", Match: relIsOp(faultdriver.OpCommit), Faults: []faultdriver.Fault{faultdriver.Deadlock, faultdriver.DropBefore, faultdriver.DropAfter}, Every: 12},
		// The feed reads far ahead (16 keys a worker at least): few reads.
		{Step: "read", Match: faultdriver.Contains(relOpQuery, "bunqueue: read"), Faults: all, Every: 3},
		{Step: "claim", Match: faultdriver.Contains(relOpQuery, "SKIP LOCKED"), Faults: all, Every: 12},
		{Step: "handler write", Match: faultdriver.Contains(relOpExec, "INSERT INTO "+relQuoted(w.effects)), Faults: all, Every: 16},
	}
	if w.mode != "lease" { // lease mode holds no transaction while a job runs
		rules = append(rules, faultdriver.Rule{Step: "savepoint", Match: relPrefix(relOpExec, "SAVEPOINT", "ROLLBACK TO SAVEPOINT"), Faults: all, Every: 16})
	}
	switch w.mode {
	case "table":
		rules = append(rules,
			faultdriver.Rule{Step: "re-check", Match: func(s faultdriver.Stmt) bool {
				return s.Op == faultdriver.OpQuery && strings.Contains(s.SQL, relQuoted("bq_rel_item")) &&
					!strings.Contains(s.SQL, "FOR UPDATE") && !strings.Contains(s.SQL, "bunqueue: read")
			}, Faults: all, Every: 10},
			faultdriver.Rule{Step: "completion", Match: faultdriver.Contains(relOpExec, "UPDATE "+relQuoted("bq_rel_item"), "status = 'done'"), Faults: all, Every: 16},
			faultdriver.Rule{Step: "failure record", Match: faultdriver.Contains(relOpExec, "UPDATE "+relQuoted("bq_rel_item"), "attempts"), Faults: all, Every: 2},
		)
	case "lock":
		rules = append(rules,
			faultdriver.Rule{Step: "completion", Match: relPrefix(relOpExec, "DELETE FROM bunqueue_jobs WHERE id"), Faults: all, Every: 16},
			faultdriver.Rule{Step: "failure record", Match: relPrefix(relOpExec, "UPDATE bunqueue_jobs SET attempts"), Faults: all, Every: 2},
		)
	case "lease":
		rules = append(rules,
			faultdriver.Rule{Step: "lease", Match: faultdriver.Contains(relOpExec, "UPDATE bunqueue_jobs ", "SET attempts = attempts + 1, lease_token"), Faults: all, Every: 10},
			faultdriver.Rule{Step: "heartbeat", Match: faultdriver.Contains(relOpExec, "UPDATE bunqueue_jobs ", "SET run_at"), Faults: all, Every: 2},
			// A slow job's completion is a statement of its own; quick
			// jobs' are written together (MySQL's DELETE of several ids
			// joins them): fewer statements, so a fault every third.
			faultdriver.Rule{Step: "completion", Match: relPrefix(relOpExec, "DELETE FROM bunqueue_jobs WHERE id", "DELETE t FROM (SELECT"), Faults: all, Every: 3},
			faultdriver.Rule{Step: "failure record", Match: relPrefix(relOpExec, "UPDATE bunqueue_jobs SET attempts = "), Faults: all, Every: 2},
		)
	}
	return rules
}

// relRecordRetry is the any-table queues' OnError: one more attempt,
// retry after 50 ms by the database clock.
func relRecordRetry(ctx context.Context, tx bun.Tx, it *relFaultItem, _ error) error {
	_, err := tx.NewUpdate().Model(it).Set("attempts = attempts + 1").
		Set("retry_at = " + plusSQL(tx, 50*time.Millisecond)).WherePK().Exec(ctx)
	return err
}

var errRelFlaky = errors.New("flaky external call (test)")

// relHeldUntilCut is the holding time of the lock-mode runs of a faulted
// workload: a run holds its item through its transaction's connection, so
// once a fault dropped or cut that connection, the server rolls the
// transaction back and may give the row to another worker while the
// handler, not told yet, still runs (its writes can no longer commit).
// Lease mode holds its items by the lease: nil.
func relHeldUntilCut(in *faultdriver.Injector, mode string) func(relRun) int64 {
	if mode == "lease" {
		return nil
	}
	cuts := map[int64][]int64{} // connection → when a fault ended it
	for _, inj := range in.Log() {
		if inj.Fault == faultdriver.DropBefore || inj.Fault == faultdriver.DropAfter {
			cuts[inj.Conn] = append(cuts[inj.Conn], inj.At)
		}
	}
	return func(r relRun) int64 {
		for _, at := range cuts[r.Conn] {
			if r.Conn != 0 && at >= r.Start && at < r.End {
				return at
			}
		}
		return r.End
	}
}

// TestReliabilityInjectedFaults is scenario 3: deadlocks (1213), lock wait
// timeouts (1205), connections dropped before a statement is sent and cut
// after it is sent, injected at every SQL step, for each mode; 4% of runs
// also fail in the handler, so that failures are recorded under faults
// too.
func TestReliabilityInjectedFaults(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	for _, mode := range []string{"table", "lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			relInjectedFaults(t, admin, mode)
		})
	}
}

func relInjectedFaults(t *testing.T, admin *bun.DB, mode string) {
	items := relSize(300, 3000)
	in := faultdriver.NewInjector(rand.Uint64())
	w := newRelWorkload(t, admin, mode)
	w.work = time.Millisecond
	w.fail = func(_ context.Context, _ bun.IDB, item int64) error {
		if rand.N(12) == 0 {
			return errRelFlaky
		}
		return nil
	}
	if mode == "lease" {
		// Long enough for heartbeats (every Lease/3).
		w.slow = func(item int64) time.Duration {
			if item%30 == 0 {
				return 1500 * time.Millisecond
			}
			return 0
		}
	}
	w.connOf = mode != "lease"
	w.addClient(relFaultDB(t, in, 0), 3, 1, bunqueue.Config{}, relRecordRetry)
	w.addClient(relFaultDB(t, in, 0), 3, 5, bunqueue.Config{}, relRecordRetry)
	rules := relStepRules(w)
	in.Add(rules...)
	in.Enable(false) // not during Start's checks
	rep := &relReport{Scenario: "injected faults at every SQL step", Mode: w.modeName()}
	began := time.Now()
	w.start()
	in.Enable(true)
	require.NoError(t, <-w.produceOver(items, 0))
	drained := relWaitFor(relSize(2*time.Minute, 10*time.Minute), func() bool { return w.remaining() == 0 })
	in.Enable(false)
	w.stop()
	rep.Duration = time.Since(began)
	require.True(t, drained, "the queue drained (%d items left)", w.remaining())

	counts := in.Counts()
	rep.Faults = in.Total()
	var steps []string
	for _, r := range rules {
		steps = append(steps, fmt.Sprintf("%s %d", r.Step, sumFaults(counts[r.Step])))
	}
	rep.note("by step: %s", strings.Join(steps, ", "))
	if n, _ := relOverlaps(w.rec.all(), nil); n > 0 && mode != "lease" {
		rep.note("%d handler runs went on after a fault cut their connection while another worker already had the item (their writes were rolled back)", n)
	}
	w.check(rep, items, relHeldUntilCut(in, mode))
	for _, r := range rules {
		for _, f := range r.Faults {
			require.Positive(t, counts[r.Step][f], "step %q got no %s (it matched %d statements)", r.Step, f, in.Matched()[r.Step])
		}
	}
}

func sumFaults(m map[faultdriver.Fault]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

var (
	relTokenRE = regexp.MustCompile(`'([0-9a-f]{16})'`)
	relInRE    = regexp.MustCompile(`SET state = 1.*WHERE id IN \(([\d, ]+)\)`)
)

// relJobNs maps the ids of the jobs kept in queue to their N.
func relJobNs(t *testing.T, db *bun.DB, queue string) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	if queue == "" {
		return out
	}
	var rows []struct {
		ID   int64
		Args []byte
	}
	require.NoError(t, db.NewRaw("SELECT id, args FROM bunqueue_jobs WHERE queue = ?", queue).Scan(t.Context(), &rows))
	for _, r := range rows {
		var a relJobArgs
		require.NoError(t, json.Unmarshal(r.Args, &a))
		out[r.ID] = a.N
	}
	return out
}

// TestReliabilityCommitOutcomeUnknown is scenario 8: the connection is cut
// right after COMMIT is sent (the server commits, the client gets an
// error and cannot know), or dropped before it is sent (nothing commits),
// on a third of the commits; in lease mode the completion, a statement of
// its own, is cut too. Completed jobs are kept (Config.Retention), and one
// item in ten fails for good, so that each item must end in exactly one
// terminal state: done once, or failed once.
func TestReliabilityCommitOutcomeUnknown(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	for _, mode := range []string{"table", "lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			relCommitUnknown(t, admin, mode)
		})
	}
}

// relCompleted returns the ids of the jobs that a lease-mode completion
// among stmts, a transaction's statements, kept as completed.
func relCompleted(stmts []string) []int64 {
	var ids []int64
	for _, s := range stmts {
		m := relInRE.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		for _, f := range strings.Split(m[1], ",") {
			var id int64
			if _, err := fmt.Sscan(strings.TrimSpace(f), &id); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func relCommitUnknown(t *testing.T, admin *bun.DB, mode string) {
	items := relSize(300, 3000)
	in := faultdriver.NewInjector(rand.Uint64())
	in.KeepTxStatements(true)
	w := newRelWorkload(t, admin, mode)
	w.work = time.Millisecond
	w.lease = time.Second // a lease lost with a cut commit runs out soon
	doomed := func(item int64) bool { return item%10 == 0 }
	var onError func(ctx context.Context, tx bun.Tx, it *relFaultItem, err error) error
	switch mode {
	case "table":
		w.fail = func(_ context.Context, _ bun.IDB, item int64) error {
			if doomed(item) {
				return errors.New("doomed (test)")
			}
			return nil
		}
		onError = func(ctx context.Context, tx bun.Tx, it *relFaultItem, cause error) error {
			if _, err := tx.NewRaw("INSERT INTO ? (item, token, who) VALUES (?, 'failed', 'OnError')", bun.Ident(w.effects), it.ID).Exec(ctx); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'failed'").WherePK().Exec(ctx)
			return err
		}
	default:
		// Jobs: the item is the job's N; N = id order is not assumed.
		w.fail = func(_ context.Context, _ bun.IDB, item int64) error {
			if doomed(item) {
				return bunqueue.Cancel(errors.New("doomed (test)"))
			}
			return nil
		}
	}
	cfg := bunqueue.Config{Retention: time.Hour}
	if mode == "table" {
		w.addClient(relFaultDB(t, in, 0), 3, 1, cfg, onError)
		w.addClient(relFaultDB(t, in, 0), 3, 5, cfg, onError)
	} else {
		w.addClient(relFaultDB(t, in, 0), 3, 1, cfg, nil)
		w.addClient(relFaultDB(t, in, 0), 3, 5, cfg, nil)
	}
	// In lease mode the quick jobs' completions are written together, in
	// a transaction of their own: its cut COMMIT is a completion whose
	// outcome is unknown.
	in.Add(faultdriver.Rule{Step: "commit", Match: relIsOp(faultdriver.OpCommit),
		Faults: []faultdriver.Fault{faultdriver.DropAfter, faultdriver.DropBefore, faultdriver.DropAfter}, Probability: 0.33})
	in.Enable(false)
	rep := &relReport{Scenario: "commit outcome unknown", Mode: w.modeName()}
	began := time.Now()
	w.start()
	in.Enable(true)
	require.NoError(t, <-w.produceOver(items, 0))
	drained := relWaitFor(relSize(2*time.Minute, 10*time.Minute), func() bool { return w.remaining() == 0 })
	in.Enable(false)
	w.stop()
	rep.Duration = time.Since(began)
	require.True(t, drained, "the queue drained (%d items left)", w.remaining())
	rep.Faults = in.Total()

	// Did the cut commits commit? A commit's transaction wrote the
	// effects whose tokens its statements carry. In lease mode, a cut
	// completion landed if its job did not run again.
	landed, notSent, sentLost := 0, 0, 0
	runsOf := map[int64]int{}
	for _, r := range w.rec.all() {
		runsOf[r.Item]++
	}
	jobN := relJobNs(t, admin, w.queue)
	for _, inj := range in.Log() {
		if inj.Stmt.Op != faultdriver.OpCommit {
			continue
		}
		if inj.Fault == faultdriver.DropBefore {
			notSent++
		}
		if ids := relCompleted(inj.TxStmts); mode == "lease" && len(ids) > 0 {
			// A cut completion landed if its jobs did not run again.
			again := false
			for _, id := range ids {
				again = again || runsOf[jobN[id]] > 1
			}
			switch {
			case inj.Fault == faultdriver.DropBefore:
				require.True(t, again, "a completion whose COMMIT was never sent committed")
			case again:
				sentLost++
			default:
				landed++
			}
			continue
		}
		var tokens []string
		for _, s := range inj.TxStmts {
			if strings.Contains(s, w.effects) {
				for _, m := range relTokenRE.FindAllStringSubmatch(s, -1) {
					tokens = append(tokens, m[1])
				}
			}
		}
		if len(tokens) == 0 {
			continue
		}
		n := count(t, admin, "SELECT COUNT(*) FROM "+w.effects+" WHERE token IN (?)", bun.List(tokens))
		switch {
		case inj.Fault == faultdriver.DropBefore:
			require.Zero(t, n, "a COMMIT that was never sent committed")
		case n > 0:
			landed++
		default:
			sentLost++
		}
	}
	what := "cut commits that carried effects"
	if mode == "lease" {
		what = "cut completions"
	}
	rep.note("%d %s committed on the server, %d did not; %d commits were dropped before they were sent", landed, what, sentLost, notSent)
	require.Positive(t, landed, "some commit reported as failed did commit: the outcome was unknown")

	// Exactly one terminal state per item.
	switch mode {
	case "table":
		done := count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'done'", w.run)
		failed := count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'failed'", w.run)
		require.Equal(t, items/10, failed, "each doomed item failed")
		require.Equal(t, items-items/10, done)
		require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM bq_rel_item i JOIN "+w.effects+
			" e ON e.item = i.id WHERE i.run = ? AND (i.status = 'failed') <> (e.token = 'failed')", w.run),
			"an item's effect rows match its terminal state")
	default:
		completed := count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND state = 1", w.queue)
		failedRows := count(t, admin, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", w.queue)
		failedJobs := count(t, admin, "SELECT COUNT(DISTINCT job_id) FROM bunqueue_failed_jobs WHERE queue = ?", w.queue)
		both := count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs j JOIN bunqueue_failed_jobs f ON f.job_id = j.id WHERE j.queue = ?", w.queue)
		rep.note("%d completed, %d failed", completed, failedJobs)
		require.Equal(t, failedJobs, failedRows, "a job failed twice")
		require.Zero(t, both, "a job both completed and failed")
		require.Equal(t, items/10, failedJobs, "each doomed job failed")
		require.Equal(t, items-items/10, completed, "each other job completed, once")
		require.Equal(t, items-items/10, count(t, admin, "SELECT COUNT(DISTINCT item) FROM "+w.effects))
		require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM "+w.effects+" WHERE item % 10 = 0"), "a doomed job's effect")
	}
	w.check(rep, items, nil)
}

// TestReliabilityDetectorsCatchViolations shows that the suite's detectors
// catch a real violation: in lease mode, a worker whose heartbeats fail
// and that ignores its context outlives its lease (1 s), and runs while a
// second client, which took the job when the lease ran out, runs it too;
// both write their effect. The overlap detector must count the two runs, and the effects
// count must see the effect twice.
func TestReliabilityDetectorsCatchViolations(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	w := newRelWorkload(t, admin, "lease")
	first := make(chan struct{}, 1)
	w.lease = time.Second
	w.ignoreCtx = true
	w.slow = func(item int64) time.Duration {
		select {
		case first <- struct{}{}:
			return 2500 * time.Millisecond // the lease is lost meanwhile
		default:
			return 0
		}
	}
	// Both clients' heartbeats fail: whoever runs the job first cannot
	// extend its lease.
	in := faultdriver.NewInjector(1)
	in.Add(faultdriver.Rule{Step: "heartbeat", Match: faultdriver.Contains(relOpExec, "UPDATE bunqueue_jobs ", "SET run_at"),
		Faults: []faultdriver.Fault{faultdriver.LockWaitTimeout}, Every: 1})
	w.addClient(relFaultDB(t, in, 0), 1, 1, bunqueue.Config{}, nil)
	w.addClient(relFaultDB(t, in, 0), 1, 1, bunqueue.Config{}, nil)
	require.NoError(t, w.produce(0, 1))
	w.start()
	require.True(t, relWaitFor(20*time.Second, func() bool {
		items, _ := relEffects(t, admin, w.effects)
		return items == 1 && count(t, admin, "SELECT COUNT(*) FROM "+w.effects) == 2
	}), "both runs wrote their effect (effects %d, runs %v, jobs %d)", count(t, admin, "SELECT COUNT(*) FROM "+w.effects), w.rec.all(),
		count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", w.queue))
	w.stop()
	n, examples := relOverlaps(w.rec.all(), nil)
	_, twice := relEffects(t, admin, w.effects)
	t.Logf("detected: %d overlapping runs (%v), %d items with their effect twice", n, examples, twice)
	require.Equal(t, 1, n, "the overlap detector sees the two runs")
	require.Equal(t, 1, twice, "the effects count sees the effect twice")
	runs := w.rec.all()
	sort.Slice(runs, func(i, j int) bool { return runs[i].Start < runs[j].Start })
	require.Len(t, runs, 2)
	require.NotEqual(t, runs[0].Who, runs[1].Who)
}

// TestReliabilityEnqueueReplyLost: the connection is cut after an
// Enqueue's (and an EnqueueMany's) INSERT was sent, outside a
// transaction. The INSERT ran on the server; the call cannot know it, so
// it must either return an error (the outcome is unknown: the job is in
// the queue once, or not at all) or return nil with the job in the queue
// exactly once, never twice.
func TestReliabilityEnqueueReplyLost(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	q := ownJobQueue(t, admin)
	in := faultdriver.NewInjector(1)
	db := relFaultDB(t, in, 0)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{q: {}}})
	in.Add(faultdriver.Rule{Step: "enqueue", Match: faultdriver.Contains(nil, "INTO bunqueue_jobs", q),
		Faults: []faultdriver.Fault{faultdriver.DropAfter}, Every: 1, Limit: 2}) // one cut per call
	ctx := t.Context()
	check := func(what string, n int64, err error) {
		t.Helper()
		rows := 0
		for _, jn := range relJobNs(t, admin, q) {
			if jn == n {
				rows++
			}
		}
		t.Logf("%s: error %v, %d job(s) in the queue", what, err, rows)
		require.LessOrEqual(t, rows, 1, "%s: the job is in the queue twice", what)
		if err == nil {
			require.Equal(t, 1, rows, "%s returned nil: the job is in the queue", what)
		}
	}
	_, err := c.Enqueue(ctx, db, relJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: q})
	time.Sleep(200 * time.Millisecond) // the cut socket closes 50 ms after the statement was sent
	check("Enqueue", 1, err)
	_, err = c.EnqueueMany(ctx, db, []bunqueue.EnqueueParams{{Args: relJobArgs{N: 2}, Opts: &bunqueue.EnqueueOpts{Queue: q}}})
	time.Sleep(200 * time.Millisecond)
	check("EnqueueMany", 2, err)
	require.Equal(t, 2, in.Total())
}
