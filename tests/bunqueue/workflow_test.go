package bunqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Workflows (EnqueueWorkflow): jobs that wait for other jobs, on every
// server, in both modes, with several clients on pools of their own.
// Each test has tables of its own (a prefix), so that it counts its own
// rows and no other schema's version 9 gets in its way.

// flowArgs is a job of a workflow: its group, its name, and the names of
// its dependencies, for the worker to check.
type flowArgs struct {
	Group int      `json:"group"`
	Name  string   `json:"name"`
	Deps  []string `json:"deps"`
	Fail  bool     `json:"fail"`
	Split int      `json:"split"` // fan out this many jobs at run time
	Outs  int      `json:"outs"`  // how many outputs of dependencies it reads, when more than Deps
}

func (flowArgs) Kind() string { return "bq_flow" }

// flowLog records, for every run of a worker, which job ran, and which
// finished (its worker returned nil): a dependent's start must come after
// its dependencies' finish.
type flowLog struct {
	mu       sync.Mutex
	runs     map[string]int  // by "group/name"
	finished map[string]bool // by "group/name"
	bad      []string        // what a worker found wrong
}

func newFlowLog() *flowLog {
	return &flowLog{runs: map[string]int{}, finished: map[string]bool{}}
}

func (l *flowLog) badf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bad = append(l.bad, fmt.Sprintf(format, a...))
}

// worker runs a flowArgs job: it checks that each dependency finished
// (in memory) and completed (its row, read through the job's db), that
// their outputs are readable, records an output, and fans out if asked.
func (l *flowLog) worker(c **bunqueue.Client, prefix string) bunqueue.Worker[flowArgs] {
	return bunqueue.WorkerFunc[flowArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[flowArgs]) error {
		a := job.Args
		key := fmt.Sprintf("%d/%s", a.Group, a.Name)
		l.mu.Lock()
		l.runs[key]++
		for _, d := range a.Deps {
			if !l.finished[fmt.Sprintf("%d/%s", a.Group, d)] {
				l.bad = append(l.bad, fmt.Sprintf("%s started before its dependency %s finished", key, d))
			}
		}
		l.mu.Unlock()
		outs, err := bunqueue.DependencyOutputs(ctx)
		if err != nil {
			return err
		}
		l.mu.Lock()
		for d := range outs {
			if !l.finished[fmt.Sprintf("%d/%s", a.Group, d)] {
				l.bad = append(l.bad, fmt.Sprintf("%s started before its dependency %s finished", key, d))
			}
		}
		l.mu.Unlock()
		if len(outs) != max(len(a.Deps), a.Outs) {
			l.badf("%s read %d outputs, want %d", key, len(outs), max(len(a.Deps), a.Outs))
		}
		for _, d := range a.Deps {
			var got string
			if err := json.Unmarshal(outs[d], &got); err != nil || got != fmt.Sprintf("%d/%s", a.Group, d) {
				l.badf("%s: the output of %s is %q (%s)", key, d, outs[d], err)
			}
		}
		if a.Fail {
			return bunqueue.Cancel(errors.New("this job fails for good (test)"))
		}
		if a.Split > 0 {
			if err := fanOut(ctx, *c, db, a); err != nil {
				return err
			}
		}
		if err := bunqueue.RecordOutput(ctx, key); err != nil {
			return err
		}
		l.mu.Lock()
		l.finished[key] = true
		l.mu.Unlock()
		return nil
	})
}

// fanOut adds a.Split jobs to the running workflow, which the job's
// dependents then wait for too.
func fanOut(ctx context.Context, c *bunqueue.Client, db bun.IDB, a flowArgs) error {
	var jobs []bunqueue.WorkflowJob
	for i := range a.Split {
		name := fmt.Sprintf("%s.%d", a.Name, i)
		jobs = append(jobs, bunqueue.WorkflowJob{Name: name, Args: flowArgs{Group: a.Group, Name: name, Deps: []string{a.Name}},
			Opts:      &bunqueue.EnqueueOpts{Queue: queueFrom(ctx)},
			DependsOn: []bunqueue.Dependency{{JobID: jobIDFrom(ctx), Name: a.Name}}})
	}
	insert := func(ctx context.Context, tx bun.IDB) error {
		_, err := c.EnqueueWorkflow(ctx, tx, jobs, &bunqueue.WorkflowOpts{HoldDependents: true})
		return err
	}
	if _, isTx := db.(bun.Tx); isTx {
		return insert(ctx, db) // lock mode: in the job's transaction
	}
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return insert(ctx, tx) })
}

// The running job's queue and id, which the worker puts in its context.
type flowJobKey struct{}

type flowJobInfo struct {
	queue string
	id    int64
}

func queueFrom(ctx context.Context) string { return ctx.Value(flowJobKey{}).(flowJobInfo).queue }
func jobIDFrom(ctx context.Context) int64  { return ctx.Value(flowJobKey{}).(flowJobInfo).id }

// withJobInfo wraps w so that its context carries the job's queue and id.
func withJobInfo(w bunqueue.Worker[flowArgs]) bunqueue.Worker[flowArgs] {
	return bunqueue.WorkerFunc[flowArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[flowArgs]) error {
		return w.Work(context.WithValue(ctx, flowJobKey{}, flowJobInfo{queue: job.Queue, id: job.ID}), db, job)
	})
}

// flowTables migrates tables of the test's own, dropped when it ends.
func flowTables(t *testing.T, db *bun.DB) bunqueue.Tables {
	tables := bunqueue.Tables{Prefix: dbtest.Name("wf") + "_"}
	dbtest.DropTables(t, db, tables)
	require.NoError(t, tables.Migrate(t.Context(), db))
	require.NoError(t, bunqueue.Migrate(t.Context(), db)) // Start's plan check on SQLite reads the default table's name
	return tables
}

// flowClients starts n clients, each on a pool of its own (as n app
// servers), each with workers of the queue in mode, running l's worker.
func flowClients(t *testing.T, srv dbtest.Server, tables bunqueue.Tables, queue string, mode bunqueue.JobMode, n int, l *flowLog) []*bunqueue.Client {
	var clients []*bunqueue.Client
	for range n {
		db := srv.Open(t, 0)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, Logger: testLogger(t), Backoff: fastBackoff, PollInterval: 50 * time.Millisecond,
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: 3, Lease: 30 * time.Second}}})
		require.NoError(t, err)
		cc := c
		require.NoError(t, bunqueue.AddWorker(c, withJobInfo(l.worker(&cc, tables.Prefix))))
		clients = append(clients, c)
	}
	return clients
}

// diamond is a group of the workflow a → b0..b3 → c → d0, d1 → e, with
// b0 fanning out two more jobs at run time when split.
func diamond(group int, queue string, split bool) []bunqueue.WorkflowJob {
	job := func(name string, deps ...string) bunqueue.WorkflowJob {
		return bunqueue.WorkflowJob{Name: name, Args: flowArgs{Group: group, Name: name, Deps: deps},
			Opts: &bunqueue.EnqueueOpts{Queue: queue}, DependsOn: bunqueue.After(deps...)}
	}
	jobs := []bunqueue.WorkflowJob{job("a"), job("b0", "a"), job("b1", "a"), job("b2", "a"), job("b3", "a"),
		job("c", "b0", "b1", "b2", "b3"), job("d0", "c"), job("d1", "c"), job("e", "d0", "d1")}
	if split {
		b0, c := jobs[1].Args.(flowArgs), jobs[5].Args.(flowArgs)
		b0.Split, c.Outs = 2, 6
		jobs[1].Args, jobs[5].Args = b0, c
	}
	return jobs
}

// A DAG run by three clients on pools of their own, three workers each,
// in lock and lease mode: every job runs once, never before its
// dependencies completed, reads their outputs; jobs added at run time
// hold the fan-in.
func TestWorkflowRunsOnceInOrder(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newFlowLog()
				clients := flowClients(t, srv, tables, queue, mode, 3, l)
				const groups = 12
				var ids []int64
				for g := range groups {
					got, err := clients[g%3].EnqueueWorkflow(t.Context(), db, diamond(g, queue, g%2 == 0), nil)
					require.NoError(t, err)
					ids = append(ids, got...)
				}
				for _, c := range clients {
					start(t, c)
				}
				want := groups*9 + groups/2*2
				jobs := tables.Names()[0]
				t.Cleanup(func() {
					if t.Failed() {
						var rows []struct {
							ID    int64
							State int
							Flow  int
							Args  string
						}
						_ = db.NewRaw("SELECT id, state, flow, args FROM "+jobs+" WHERE state <> 1 ORDER BY id").Scan(context.Background(), &rows)
						var deps []struct {
							JobID, DependsOn int64
							Done             int
						}
						_ = db.NewRaw("SELECT job_id, depends_on, done FROM "+tables.Prefix+"job_deps ORDER BY job_id").Scan(context.Background(), &deps)
						var done []int64
						_ = db.NewRaw("SELECT id FROM "+jobs+" WHERE state = 1 ORDER BY id LIMIT 30").Scan(context.Background(), &done)
						t.Logf("unfinished: %+v\ndeps: %+v\ncompleted: %v\nbad: %v runs: %v", rows, deps, done, l.bad, l.runs)
					}
				})
				eventually(t, 60*time.Second, func() bool {
					l.mu.Lock()
					defer l.mu.Unlock()
					return len(l.finished) == want
				}, "every job of the workflows ran")
				eventually(t, 30*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE state <> 1") == 0
				}, "every job completed")
				l.mu.Lock()
				defer l.mu.Unlock()
				require.Empty(t, l.bad)
				for key, n := range l.runs {
					require.Equal(t, 1, n, "job %s ran once", key)
				}
				require.Len(t, l.runs, want)
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"job_deps"), "a finished dependent keeps no dependency rows")
			})
		}
	})
}

// A dependency that fails for good cancels its dependents, in cascade,
// unless they ignore it; JobCancel and JobDelete apply the same
// policies; JobGet says what a blocked job waits for, and JobList lists
// it.
func TestWorkflowFailurePolicies(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := t.Context()
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newFlowLog()
				clients := flowClients(t, srv, tables, queue, mode, 2, l)
				c := clients[0]
				job := func(name string, fail bool, deps ...bunqueue.Dependency) bunqueue.WorkflowJob {
					var names []string
					for _, d := range deps {
						if d.Policy != bunqueue.DependencyIgnore {
							names = append(names, d.Name)
						}
					}
					return bunqueue.WorkflowJob{Name: name, Args: flowArgs{Name: name, Deps: names, Fail: fail},
						Opts: &bunqueue.EnqueueOpts{Queue: queue}, DependsOn: deps}
				}
				ignore := func(name string) bunqueue.Dependency {
					return bunqueue.Dependency{Name: name, Policy: bunqueue.DependencyIgnore}
				}
				ids, err := c.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{
					job("a", true), job("b", false, bunqueue.After("a")...), job("c", false, bunqueue.After("b")...),
					job("d", false, ignore("a")), job("e", false, bunqueue.After("d")...),
				}, nil)
				require.NoError(t, err)

				// Before any worker: b waits for a.
				rec, err := c.JobGet(ctx, ids[1])
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobStateBlocked, rec.State)
				require.Equal(t, []bunqueue.JobDependency{{JobID: ids[0], Name: "a", Policy: bunqueue.DependencyCancel}}, rec.Dependencies)
				page, err := c.JobList(ctx, bunqueue.JobListFilter{Queue: queue, States: []bunqueue.JobState{bunqueue.JobStateBlocked}})
				require.NoError(t, err)
				require.Len(t, page.Jobs, 4, "b, c, d and e are blocked")
				require.ErrorIs(t, c.JobRunNow(ctx, ids[1]), bunqueue.ErrJobBlocked)

				for _, c := range clients {
					start(t, c)
				}
				for i, name := range []string{"b", "c"} {
					var rec *bunqueue.JobRecord
					eventually(t, 30*time.Second, func() bool {
						rec, err = c.JobGet(ctx, ids[1+i])
						return err == nil && rec.State == bunqueue.JobStateFailed
					}, "%s is cancelled", name)
					require.Contains(t, rec.LastError, fmt.Sprintf("job %d (%q), which it depends on, ", ids[i], []string{"a", "b"}[i]), name)
				}
				eventually(t, 30*time.Second, func() bool {
					rec, err := c.JobGet(ctx, ids[4])
					return err == nil && rec.State == bunqueue.JobStateCompleted
				}, "d ignored a's failure, and e ran after it")
				l.mu.Lock()
				require.Empty(t, l.bad)
				require.Zero(t, l.runs["0/b"]+l.runs["0/c"], "a cancelled dependent never runs")
				require.Equal(t, 1, l.runs["0/a"])
				l.mu.Unlock()

				// JobCancel of a blocked job cancels its dependents;
				// JobDelete of a dependency that is ignored releases its
				// dependent.
				ids, err = c.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{
					{Name: "x", Args: flowArgs{Name: "x"}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour}},
					job("y", false, bunqueue.After("x")...), job("z", false, bunqueue.After("y")...),
					{Name: "w", Args: flowArgs{Name: "w"}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour}},
					job("v", false, ignore("w")),
				}, nil)
				require.NoError(t, err)
				was, err := c.JobCancel(ctx, ids[1])
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobStateBlocked, was)
				rec, err = c.JobGet(ctx, ids[2])
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobStateFailed, rec.State, "z was cancelled with y")
				require.Contains(t, rec.LastError, fmt.Sprintf("job %d (\"y\"), which it depends on, was cancelled", ids[1]))
				require.NoError(t, c.JobDelete(ctx, ids[3]))
				eventually(t, 30*time.Second, func() bool {
					rec, err := c.JobGet(ctx, ids[4])
					return err == nil && rec.State == bunqueue.JobStateCompleted
				}, "v ran once w was deleted")
			})
		}
	})
}

// A group enqueued in a transaction that rolls back leaves nothing; a
// cycle, a dependency outside the group, a name given twice are errors
// that name the job, and insert nothing.
func TestWorkflowEnqueueChecks(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		db := srv.Open(t, 0)
		tables := flowTables(t, db)
		queue := jobQueue(t)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		require.NoError(t, err)
		jobs := tables.Names()[0]
		job := func(name string, deps ...string) bunqueue.WorkflowJob {
			return bunqueue.WorkflowJob{Name: name, Args: flowArgs{Name: name}, Opts: &bunqueue.EnqueueOpts{Queue: queue}, DependsOn: bunqueue.After(deps...)}
		}
		rollback := errors.New("roll back (test)")
		err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			ids, err := c.EnqueueWorkflow(ctx, tx, []bunqueue.WorkflowJob{job("a"), job("b", "a")}, nil)
			require.NoError(t, err)
			require.Len(t, ids, 2)
			return rollback
		})
		require.ErrorIs(t, err, rollback)
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+jobs))
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"job_deps"))

		for _, tc := range []struct {
			jobs []bunqueue.WorkflowJob
			want string
		}{
			{[]bunqueue.WorkflowJob{job("a", "c"), job("b", "a"), job("c", "b")}, `job "a" is in a cycle of dependencies: "a" -> "c" -> "b" -> "a"`},
			{[]bunqueue.WorkflowJob{job("a", "a")}, `job "a" is in a cycle of dependencies: "a" -> "a"`},
			{[]bunqueue.WorkflowJob{job("a"), job("b", "nope")}, `job "b" depends on "nope", which is not a job of the group`},
			{[]bunqueue.WorkflowJob{job("a"), job("a")}, `job 1 ("a"): the name is given to two jobs of the group`},
			{[]bunqueue.WorkflowJob{job("a"), job("b", "a", "a")}, `job "b" depends on "a" twice`},
		} {
			_, err := c.EnqueueWorkflow(ctx, db, tc.jobs, nil)
			require.ErrorIs(t, err, bunqueue.ErrInvalidJob)
			require.ErrorContains(t, err, tc.want)
		}
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+jobs), "nothing inserted")
		_, err = c.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{job("a")}, &bunqueue.WorkflowOpts{HoldDependents: true})
		require.ErrorIs(t, err, bunqueue.ErrNotInWorker)
	})
}

// The cleaner never deletes a completed dependency whose dependent has
// not finished, and deletes it once it has.
func TestWorkflowRetentionKeepsDependencies(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		db := srv.Open(t, 0)
		tables := flowTables(t, db)
		queue := jobQueue(t)
		l := newFlowLog()
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, Logger: testLogger(t), PollInterval: 50 * time.Millisecond,
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Retention: time.Millisecond, OutputRetention: time.Millisecond}}})
		require.NoError(t, err)
		cc := c
		require.NoError(t, bunqueue.AddWorker(c, withJobInfo(l.worker(&cc, tables.Prefix))))
		ids, err := c.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{
			{Name: "a", Args: flowArgs{Name: "a"}, Opts: &bunqueue.EnqueueOpts{Queue: queue}},
			{Name: "late", Args: flowArgs{Name: "late"}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour}},
			{Name: "b", Args: flowArgs{Name: "b", Deps: []string{"a", "late"}}, Opts: &bunqueue.EnqueueOpts{Queue: queue}, DependsOn: bunqueue.After("a", "late")},
		}, nil)
		require.NoError(t, err)
		start(t, c)
		jobs := tables.Names()[0]
		eventually(t, 30*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE id = ? AND state = 1", ids[0]) == 1
		}, "a completed")
		control := enqueueOne(t, c, db, flowArgs{Name: "control"}, &bunqueue.EnqueueOpts{Queue: queue})
		// The control completes after a, and so is due for the cleaner
		// after it: the pass that deletes it would have deleted a first.
		eventually(t, 30*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE id = ?", control) == 0
		}, "the cleaner deleted the control job, which recorded an output and has no dependents")
		require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE id = ? AND state = 1", ids[0]), "a is kept: b needs it")
		require.NoError(t, c.JobRunNow(ctx, ids[1]))
		eventually(t, 30*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE id IN (?)", bun.List(ids)) == 0
		}, "b ran, read a's output, and then the cleaner deleted all three")
		l.mu.Lock()
		defer l.mu.Unlock()
		require.Empty(t, l.bad)
		require.Equal(t, 1, l.runs["0/b"])
	})
}
