package bunqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

type keepArgs struct {
	Output string `json:"output,omitempty"` // recorded with RecordOutput, unless empty
}

func (keepArgs) Kind() string { return "t_keep" }

// keepWorker completes its jobs, recording the output they ask for.
var keepWorker = bunqueue.WorkerFunc[keepArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[keepArgs]) error {
	if job.Args.Output != "" {
		return bunqueue.RecordOutput(ctx, job.Args.Output)
	}
	return nil
})

// keptRow is a job as the retention tests read it: whether it is there,
// its state, its output, and how long ago it completed, by the database
// clock.
type keptRow struct {
	State  int
	Output []byte
	AgeUS  *int64 // µs since completed_at; nil while it has not completed
}

func readKept(t *testing.T, db *bun.DB, id int64) (keptRow, bool) {
	t.Helper()
	var r []keptRow
	require.NoError(t, db.NewRaw("SELECT state, output, "+dialectOf(db).MicrosSince("completed_at")+" AS age_us FROM bunqueue_jobs WHERE id = ?", id).
		Scan(t.Context(), &r))
	if len(r) == 0 {
		return keptRow{}, false
	}
	return r[0], true
}

// waitGone waits until the job id is no longer in the jobs table, and
// returns how long ago it had completed when it was last seen: no less
// than what kept it, minus a poll, if it was not deleted early.
func waitGone(t *testing.T, db *bun.DB, id int64, within time.Duration) time.Duration {
	t.Helper()
	var last time.Duration
	eventually(t, within, func() bool {
		r, ok := readKept(t, db, id)
		if ok && r.AgeUS != nil {
			last = time.Duration(*r.AgeUS) * time.Microsecond
		}
		return !ok
	}, "job %d is deleted", id)
	return last
}

// Retention is per jobs queue, and a client's cleaner deletes only the
// completed jobs of the queues it runs, each at its queue's retention;
// a completed job that recorded an output is kept for its queue's
// OutputRetention at least, even where its Retention is zero; the
// completed jobs of a queue no client runs are left alone. Two clients
// on pools of their own, on every server: A runs qa (Retention 2s,
// outputs a day, in lock mode); B runs qb (Retention 6s) and qo (no
// Retention, outputs kept 3s, in lease mode).
func TestRetentionPerQueue(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		dbA, dbB := srv.Open(t, 0), srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), dbA))
		qa, qb, qo, qx := dbtest.Name("qa"), dbtest.Name("qb"), dbtest.Name("qo"), dbtest.Name("qx")
		for _, q := range []string{qa, qb, qo, qx} {
			t.Cleanup(func() { deleteJobQueueRows(dbA, q) })
		}
		const retA, retB, outO = 2 * time.Second, 6 * time.Second, 3 * time.Second
		a := jobsTestClient(t, dbA, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{qa: {Retention: retA}}})
		b := jobsTestClient(t, dbB, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{
			qb: {Retention: retB},
			qo: {OutputRetention: outO, Mode: bunqueue.ModeLease},
		}})
		require.NoError(t, bunqueue.AddWorker(a, keepWorker))
		require.NoError(t, bunqueue.AddWorker(b, keepWorker))

		// A completed job of a queue that neither client runs, long past
		// every retention.
		stale := insertRawJob(t, dbA, qx, "t_keep", []byte(`{}`), nil, 0, 1)
		_, err := dbA.NewRaw("UPDATE bunqueue_jobs SET state = 1, completed_at = "+plusSQL(dbA, -time.Hour)+" WHERE id = ?", stale).Exec(t.Context())
		require.NoError(t, err)

		enqueue := func(c *bunqueue.Client, queue, output string) int64 {
			return enqueueOne(t, c, dbA, keepArgs{Output: output}, &bunqueue.EnqueueOpts{Queue: queue})
		}
		jobA, outA := enqueue(a, qa, ""), enqueue(a, qa, "kept a day")
		jobB := enqueue(b, qb, "")
		outO1, bareO := enqueue(b, qo, "kept 3s"), enqueue(b, qo, "")
		start(t, a)
		start(t, b)

		eventually(t, 10*time.Second, func() bool {
			r, ok := readKept(t, dbA, outO1)
			return ok && r.State == 1
		}, "qo's job with an output completes and is kept")
		rec, err := b.JobGet(t.Context(), outO1)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateCompleted, rec.State)
		require.JSONEq(t, `"kept 3s"`, string(rec.Output), "JobGet reads the output of a job whose queue keeps no completed job")
		done := func() bool {
			return count(t, dbA, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND state = 0", qo) == 0
		}
		eventually(t, 10*time.Second, done, "qo's jobs complete")
		_, err = b.JobGet(t.Context(), bareO)
		require.ErrorIs(t, err, bunqueue.ErrJobNotFound, "a job without an output is deleted as it completes where its queue has no Retention")

		// qa's bare job goes at qa's retention, and A's cleaner leaves
		// qb's job, kept longer, alone.
		age := waitGone(t, dbA, jobA, retA+10*time.Second)
		require.Greater(t, age, retA-time.Second, "qa's job was deleted before its retention")
		r, ok := readKept(t, dbA, jobB)
		require.True(t, ok, "qb's job was deleted at qa's retention, by the cleaner of a client that does not run qb")
		require.Equal(t, 1, r.State)

		// qo's output is readable for its OutputRetention, then goes.
		age = waitGone(t, dbA, outO1, outO+10*time.Second)
		require.Greater(t, age, outO-time.Second, "qo's output was deleted before its OutputRetention")
		_, err = b.JobGet(t.Context(), outO1)
		require.ErrorIs(t, err, bunqueue.ErrJobNotFound)

		age = waitGone(t, dbA, jobB, retB+10*time.Second)
		require.Greater(t, age, retB-time.Second, "qb's job was deleted before its retention")

		// qa's job with an output outlives qa's Retention: its output is
		// kept a day. The stale job of qx, which no client runs, is left
		// alone.
		rec, err = a.JobGet(t.Context(), outA)
		require.NoError(t, err)
		require.Equal(t, bunqueue.JobStateCompleted, rec.State)
		require.JSONEq(t, `"kept a day"`, string(rec.Output))
		_, ok = readKept(t, dbA, stale)
		require.True(t, ok, "a cleaner deleted a completed job of a queue its client does not run")
	})
}

// A job that records no output completes as it did before outputs were
// kept without a Retention: by one DELETE, and no statement reads or
// writes an output; one that records an output completes by one UPDATE
// that keeps it with its output, in place of that DELETE, not besides
// it. Counted at the driver, with one worker and one job a batch, in
// both modes (MySQL or MariaDB, and PostgreSQL: the fault driver's
// servers).
func TestOutputCompletionStatements(t *testing.T) {
	t.Parallel()
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			admin := migrated(t, 0)
			queue := ownJobQueue(t, admin)
			in := faultdriver.NewInjector(1)
			never := []faultdriver.Fault{faultdriver.Deadlock} // probability 0: the rules count what they match
			exec := []faultdriver.Op{faultdriver.OpExec}
			jobs := func(s faultdriver.Stmt) bool { return strings.Contains(s.SQL, "bunqueue_jobs") }
			in.Add( // the first rule that matches a statement counts it
				faultdriver.Rule{Step: "cleaner", Match: faultdriver.Contains(nil, "completed_at <"), Faults: never},
				faultdriver.Rule{Step: "output", Match: faultdriver.Contains(nil, "output"), Faults: never},
				faultdriver.Rule{Step: "delete", Match: func(s faultdriver.Stmt) bool { return relPrefix(exec, "DELETE")(s) && jobs(s) }, Faults: never},
				faultdriver.Rule{Step: "keep", Match: faultdriver.Contains(exec, "UPDATE bunqueue_jobs", "state = 1"), Faults: never},
				faultdriver.Rule{Step: "other writes", Match: func(s faultdriver.Stmt) bool {
					return relPrefix(exec, "UPDATE", "INSERT")(s) && jobs(s)
				}, Faults: never},
			)
			c := jobsTestClient(t, relFaultDB(t, in, 0), bunqueue.Config{
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1, BatchSize: 1, Mode: mode}},
			})
			require.NoError(t, bunqueue.AddWorker(c, keepWorker))
			start(t, c)
			const n = 20
			run := func(output string) map[string]int {
				before := in.Matched()
				var params []bunqueue.EnqueueParams
				for range n {
					params = append(params, bunqueue.EnqueueParams{Args: keepArgs{Output: output}, Opts: &bunqueue.EnqueueOpts{Queue: queue}})
				}
				_, err := c.EnqueueMany(t.Context(), admin, params)
				require.NoError(t, err)
				eventually(t, 30*time.Second, func() bool {
					return count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND state = 0", queue) == 0
				}, "the jobs complete")
				got := in.Matched()
				for k := range got {
					got[k] -= before[k]
				}
				return got
			}
			bare := run("")
			t.Logf("%d jobs without an output: %v", n, bare)
			require.Equal(t, n, bare["delete"], "one DELETE completes each job")
			require.Zero(t, bare["output"], "no statement on outputs")
			require.Zero(t, bare["keep"])
			kept := run("out")
			t.Logf("%d jobs with an output: %v", n, kept)
			require.Equal(t, n, kept["output"], "one UPDATE keeps each job with its output")
			require.Zero(t, kept["delete"])
			require.Zero(t, kept["keep"])
			require.Equal(t, bare["other writes"], kept["other writes"], "the other writes (a lease's) are the same")
			require.Equal(t, n, count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND state = 1 AND output IS NOT NULL", queue))
		})
	}
}
