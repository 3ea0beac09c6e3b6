package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Sequences (EnqueueOpts.Sequence): the jobs of a key run one at a time,
// in enqueue order, on every server, in both modes, enqueued and run by
// several clients on pools of their own.

// seqArgs is a job of a sequence: its key, and its name for the log.
type seqArgs struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Fail string `json:"fail"` // "always", "once" (the first run only), or ""
}

func (seqArgs) Kind() string { return "bq_seq" }

// seqLog records every run of the jobs of sequences: which keys run
// (never two jobs of one at once), which job of each started last (ids
// grow with enqueue order within a key: each enqueue of a key inserts
// after the one before it committed), and how often each ran, by name (a
// rolled-back job's id may be given again, on SQLite).
type seqLog struct {
	mu       sync.Mutex
	running  map[string]int64 // by key: the job that runs, 0 none
	last     map[string]int64 // by key: the last job that started
	runs     map[string]int   // by job name
	names    map[string][]string
	ids      map[string][]int64 // by key: the jobs in the order they started
	failed   map[string]bool    // the names that failed once
	retried  bool               // a job of a sequence was retried (RetryFailed): a new id, in an older place
	inFlight int
	maxIn    int // the most jobs that ran at once, of any keys
	bad      []string
}

func newSeqLog() *seqLog {
	return &seqLog{running: map[string]int64{}, last: map[string]int64{}, runs: map[string]int{},
		names: map[string][]string{}, ids: map[string][]int64{}, failed: map[string]bool{}}
}

// worker runs a seqArgs job: it checks that no other job of its key runs
// and that the last one that started was enqueued before it.
func (l *seqLog) worker() bunqueue.Worker[seqArgs] {
	return bunqueue.WorkerFunc[seqArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[seqArgs]) error {
		a := job.Args
		l.mu.Lock()
		if other := l.running[a.Key]; other != 0 {
			l.bad = append(l.bad, fmt.Sprintf("job %d of %s started while job %d of it ran", job.ID, a.Key, other))
		}
		if job.ID < l.last[a.Key] && !l.retried {
			l.bad = append(l.bad, fmt.Sprintf("job %d of %s started after job %d, enqueued later", job.ID, a.Key, l.last[a.Key]))
		}
		l.running[a.Key], l.last[a.Key] = job.ID, job.ID
		l.runs[a.Name]++
		l.names[a.Key] = append(l.names[a.Key], a.Name)
		l.ids[a.Key] = append(l.ids[a.Key], job.ID)
		l.inFlight++
		l.maxIn = max(l.maxIn, l.inFlight)
		fail := a.Fail == "always" || (a.Fail == "once" && !l.failed[a.Name])
		l.failed[a.Name] = l.failed[a.Name] || fail
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // room for another key's job, or a wrong one of this key, to start
		l.mu.Lock()
		l.running[a.Key] = 0
		l.inFlight--
		l.mu.Unlock()
		if fail {
			return bunqueue.Cancel(errors.New("this job fails for good (test)"))
		}
		return nil
	})
}

// seqClients starts n clients, each on a pool of its own (as n app
// servers), with 3 workers of queue in mode, and returns them with their
// pools.
func seqClients(t *testing.T, srv dbtest.Server, tables bunqueue.Tables, queue string, mode bunqueue.JobMode, n int, l *seqLog) ([]*bunqueue.Client, []*bun.DB) {
	var clients []*bunqueue.Client
	var dbs []*bun.DB
	for range n {
		db := srv.Open(t, 0)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, Logger: testLogger(t), Backoff: fastBackoff, PollInterval: 50 * time.Millisecond,
			JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: 3, Lease: 30 * time.Second}}})
		require.NoError(t, err)
		require.NoError(t, bunqueue.AddWorker(c, l.worker()))
		clients, dbs = append(clients, c), append(dbs, db)
	}
	return clients, dbs
}

// Six sequences of 12 jobs each, enqueued at once by three clients on
// pools of their own while their workers (three each) run them, in lock
// and lease mode; every fifth enqueue is rolled back. Every job that
// committed runs once; within a key, one at a time and in enqueue order;
// nothing is left in the sequences and dependencies tables.
func TestSequenceRunsOnceInOrder(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newSeqLog()
				clients, dbs := seqClients(t, srv, tables, queue, mode, 3, l)
				for _, c := range clients {
					start(t, c)
				}
				const keys, perClient = 6, 4
				var mu sync.Mutex
				var committed, rolledBack []string
				var wg sync.WaitGroup
				for i, c := range clients {
					wg.Go(func() {
						for n := range perClient * keys {
							key, name := fmt.Sprintf("k%d", n%keys), fmt.Sprintf("%d.%d", i, n)
							_, err := enqueueSeq(t.Context(), c, dbs[i], queue, key, name, n%5 == 4)
							if !assertNoError(t, err) {
								return
							}
							mu.Lock()
							if n%5 == 4 {
								rolledBack = append(rolledBack, name)
							} else {
								committed = append(committed, name)
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				require.NotEmpty(t, rolledBack)
				jobs := tables.Names()[0]
				eventually(t, 60*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+jobs+" WHERE queue = ?", queue) == 0
				}, "every job of the sequences completed")
				l.mu.Lock()
				defer l.mu.Unlock()
				require.Empty(t, l.bad)
				for _, name := range committed {
					require.Equal(t, 1, l.runs[name], "job %s ran once", name)
				}
				for _, name := range rolledBack {
					require.Zero(t, l.runs[name], "job %s, rolled back, never ran", name)
				}
				require.Len(t, l.runs, len(committed))
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"sequences WHERE tail <> 0"), "a sequence whose jobs all completed has no tail")
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"job_deps"))
				t.Logf("%d jobs, at most %d at once", len(committed), l.maxIn)
			})
		}
	})
}

// enqueueSeq enqueues the job name of the sequence key through a
// transaction of db, which it rolls back if rollback, and returns its id.
func enqueueSeq(ctx context.Context, c *bunqueue.Client, db *bun.DB, queue, key, name string, rollback bool) (id int64, err error) {
	for range 3 {
		// MariaDB: the first enqueue of a new key that rolls back while
		// two others wait for it may deadlock one of them (InnoDB's
		// next-key lock of an insert's duplicate check): its transaction
		// is rolled back, and retried, as any deadlock's.
		if id, err = enqueueSeqOnce(ctx, c, db, queue, key, name, rollback); err == nil || !strings.Contains(err.Error(), "Deadlock found") {
			return id, err
		}
	}
	return id, err
}

// enqueueSeqOnce is one try of enqueueSeq.
func enqueueSeqOnce(ctx context.Context, c *bunqueue.Client, db *bun.DB, queue, key, name string, rollback bool) (int64, error) {
	var id int64
	errRollback := errors.New("roll back (test)")
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := c.Enqueue(ctx, tx, seqArgs{Key: key, Name: name}, &bunqueue.EnqueueOpts{Queue: queue, Sequence: key})
		if err != nil {
			return err
		}
		id = res.ID
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		err = nil
	}
	return id, err
}

// assertNoError is require.NoError for a goroutine other than the test's:
// it marks the test failed and reports whether err is nil.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
	return err == nil
}

// A head that fails for good holds its sequence, and no other: its
// successors stay blocked (JobGet says for which job) until RetryFailed
// puts it back, which runs it and then them in order, or until JobDelete
// or DeleteFailed deletes it, which releases them (as JobDelete of a
// head that waits does). Under
// DependencyIgnore the next job runs after a failure. A job waiting
// behind another cannot be cancelled or deleted.
func TestSequenceFailedHeadHolds(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := t.Context()
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newSeqLog()
				clients, _ := seqClients(t, srv, tables, queue, mode, 2, l)
				c := clients[0]
				enqueue := func(key, name, fail string, policy bunqueue.DependencyPolicy) int64 {
					res, err := c.Enqueue(ctx, db, seqArgs{Key: key, Name: name, Fail: fail},
						&bunqueue.EnqueueOpts{Queue: queue, Sequence: key, SequencePolicy: policy})
					require.NoError(t, err)
					return res.ID
				}
				a1 := enqueue("a", "a1", "once", 0)
				a2 := enqueue("a", "a2", "", 0)
				enqueue("a", "a3", "", 0)
				enqueue("b", "b1", "", 0)
				enqueue("b", "b2", "", 0)
				enqueue("c", "c1", "always", 0)
				enqueue("c", "c2", "", bunqueue.DependencyIgnore)
				d1 := enqueue("d", "d1", "always", 0)
				enqueue("d", "d2", "", 0)
				e1 := enqueue("e", "e1", "always", 0)
				enqueue("e", "e2", "", 0)
				f1, err := c.Enqueue(ctx, db, seqArgs{Key: "f", Name: "f1"}, &bunqueue.EnqueueOpts{Queue: queue, Sequence: "f", Delay: time.Hour})
				require.NoError(t, err)
				enqueue("f", "f2", "", 0)
				for _, c := range clients {
					start(t, c)
				}
				names := func(key string) []string {
					l.mu.Lock()
					defer l.mu.Unlock()
					return append([]string(nil), l.names[key]...)
				}
				eventually(t, 30*time.Second, func() bool { return len(names("b")) == 2 && len(names("c")) == 2 },
					"b ran while a's head failed; c2 ran after c1 failed")
				failedJob := func(jobID int64) bunqueue.FailedJob {
					var f bunqueue.FailedJob
					eventually(t, 30*time.Second, func() bool {
						all, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
						require.NoError(t, err)
						for _, j := range all {
							if j.JobID == jobID {
								f = j
								return true
							}
						}
						return false
					}, "job %d failed", jobID)
					return f
				}
				failedJob(a1)
				failedJob(d1)

				// a2 waits for the failed a1, and says so; a4, enqueued
				// now, waits in line.
				rec, err := c.JobGet(ctx, a2)
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobStateBlocked, rec.State)
				require.Equal(t, []bunqueue.JobDependency{{JobID: a1, Name: "a", Policy: bunqueue.DependencyHold}}, rec.Dependencies)
				a4 := enqueue("a", "a4", "", 0)
				rec, err = c.JobGet(ctx, a4)
				require.NoError(t, err)
				require.Equal(t, bunqueue.JobStateBlocked, rec.State)
				require.ErrorIs(t, c.JobDelete(ctx, a2), bunqueue.ErrJobBlocked)
				_, err = c.JobCancel(ctx, a2)
				require.ErrorIs(t, err, bunqueue.ErrJobBlocked)
				require.Equal(t, []string{"a1"}, names("a"))
				require.Equal(t, []string{"d1"}, names("d"))

				// RetryFailed: a1 runs again (and completes), then a2,
				// a3, a4 in order. JobDelete of d1 and DeleteFailed of
				// e1 release d2 and e2.
				l.mu.Lock()
				l.retried = true
				l.mu.Unlock()
				_, err = c.RetryFailed(ctx, failedJob(a1).ID)
				require.NoError(t, err)
				require.NoError(t, c.JobDelete(ctx, d1))
				require.NoError(t, c.JobDelete(ctx, f1.ID)) // a head that waits, deleted: f2 runs
				require.NoError(t, c.DeleteFailed(ctx, failedJob(e1).ID))
				eventually(t, 30*time.Second, func() bool {
					return len(names("a")) == 5 && len(names("d")) == 2 && len(names("e")) == 2 && len(names("f")) == 1
				}, "the sequences went on")
				require.Equal(t, []string{"a1", "a1", "a2", "a3", "a4"}, names("a"))
				eventually(t, 30*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+tables.Names()[0]+" WHERE queue = ?", queue) == 0
				}, "every job left the jobs table")
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"sequences WHERE tail <> 0"), "every sequence's last job completed")
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"job_deps"))
				l.mu.Lock()
				defer l.mu.Unlock()
				require.Empty(t, l.bad)
			})
		}
	})
}

// An ordinary job (no Sequence) pays nothing for sequences: its enqueue,
// claim and completion, in both modes, run no statement on the sequences
// or dependencies tables, as the hook of the client's pool sees them. A
// job of a sequence does.
func TestSequenceOrdinaryJobsPayNothing(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := t.Context()
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newSeqLog()
				hooked := srv.Open(t, 0)
				var log stmtLog
				hooked.AddQueryHook(&log)
				c, err := bunqueue.NewClient(hooked, &bunqueue.Config{Tables: tables, Logger: testLogger(t), PollInterval: 50 * time.Millisecond,
					JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: 1, Lease: 30 * time.Second}}})
				require.NoError(t, err)
				require.NoError(t, bunqueue.AddWorker(c, l.worker()))
				start(t, c)
				seqTables := func() (n int) {
					for _, s := range log.matching("") {
						if strings.Contains(s.head, tables.Prefix+"sequences") || strings.Contains(s.head, tables.Prefix+"job_deps") {
							t.Log(s.head)
							n++
						}
					}
					return n
				}
				seqTables() // Start's statements: its check of the schema reads every table
				for i := range 3 {
					_, err := c.Enqueue(ctx, hooked, seqArgs{Key: "none", Name: fmt.Sprint("plain", i)}, &bunqueue.EnqueueOpts{Queue: queue})
					require.NoError(t, err)
				}
				eventually(t, 30*time.Second, func() bool {
					l.mu.Lock()
					defer l.mu.Unlock()
					return len(l.runs) == 3
				}, "the jobs ran")
				eventually(t, 30*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+tables.Names()[0]+" WHERE queue = ?", queue) == 0
				}, "the jobs completed")
				require.Zero(t, seqTables(), "an ordinary job's statements never touch sequences or job_deps")
				_, err = c.Enqueue(ctx, hooked, seqArgs{Key: "k", Name: "s"}, &bunqueue.EnqueueOpts{Queue: queue, Sequence: "k"})
				require.NoError(t, err)
				eventually(t, 30*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+tables.Names()[0]+" WHERE queue = ?", queue) == 0
				}, "the job of a sequence completed")
				require.NotZero(t, seqTables(), "the hook sees a sequence's statements")
			})
		}
	})
}

// What a sequence does not take is refused, naming the field, wrapping
// ErrInvalidJob, and nothing is inserted.
func TestSequenceRefused(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		db := srv.Open(t, 0)
		tables := flowTables(t, db)
		queue := jobQueue(t)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tables, JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		require.NoError(t, err)
		args := seqArgs{Key: "k"}
		for opts, want := range map[*bunqueue.EnqueueOpts]string{
			{Queue: queue, Sequence: "k", UniqueKey: "u"}:                            "set EnqueueOpts.Sequence or EnqueueOpts.UniqueKey, not both",
			{Queue: queue, SequencePolicy: bunqueue.DependencyHold}:                  "EnqueueOpts.SequencePolicy is set without a Sequence",
			{Queue: queue, Sequence: "k", SequencePolicy: 9}:                         "EnqueueOpts.SequencePolicy is 9",
			{Queue: queue, Sequence: "k", SequencePolicy: bunqueue.DependencyCancel}: "not DependencyHold or DependencyIgnore",
			{Queue: queue, Sequence: strings.Repeat("k", 256)}:                       "EnqueueOpts.Sequence must have at most 255 bytes",
			{Queue: queue, Sequence: "k\x00"}:                                        "EnqueueOpts.Sequence",
		} {
			_, err := c.Enqueue(ctx, db, args, opts)
			require.ErrorIs(t, err, bunqueue.ErrInvalidJob)
			require.ErrorContains(t, err, want)
		}
		_, err = c.EnqueueMany(ctx, db, []bunqueue.EnqueueParams{{Args: args, Opts: &bunqueue.EnqueueOpts{Queue: queue, Sequence: "k"}}})
		require.ErrorIs(t, err, bunqueue.ErrInvalidJob)
		require.ErrorContains(t, err, "EnqueueOpts.Sequence is for Enqueue")
		_, err = c.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{{Name: "a", Args: args, Opts: &bunqueue.EnqueueOpts{Queue: queue, Sequence: "k"}}}, nil)
		require.ErrorIs(t, err, bunqueue.ErrInvalidJob)
		require.ErrorContains(t, err, "a workflow's jobs have no Sequence")
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Names()[0]))
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"sequences"))
	})
}

// RetryFailed of a held head while three clients enqueue more jobs of its
// key: the retried head runs first (in the head's place), then every job
// once, one at a time, in enqueue order, whichever of the retry and each
// enqueue took the key's row first.
func TestSequenceRetryWhileEnqueued(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := t.Context()
				db := srv.Open(t, 0)
				tables := flowTables(t, db)
				queue := jobQueue(t)
				l := newSeqLog()
				clients, dbs := seqClients(t, srv, tables, queue, mode, 3, l)
				c := clients[0]
				head, err := c.Enqueue(ctx, db, seqArgs{Key: "k", Name: "head", Fail: "once"}, &bunqueue.EnqueueOpts{Queue: queue, Sequence: "k"})
				require.NoError(t, err)
				for _, c := range clients {
					start(t, c)
				}
				var failedID int64
				eventually(t, 30*time.Second, func() bool {
					all, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: queue})
					require.NoError(t, err)
					if len(all) == 1 && all[0].JobID == head.ID {
						failedID = all[0].ID
					}
					return failedID != 0
				}, "the head failed")
				l.mu.Lock()
				l.retried = true
				l.mu.Unlock()
				const perClient = 5
				var wg sync.WaitGroup
				for i, c := range clients {
					wg.Go(func() {
						for n := range perClient {
							_, err := enqueueSeq(ctx, c, dbs[i], queue, "k", fmt.Sprintf("%d.%d", i, n), false)
							if !assertNoError(t, err) {
								return
							}
						}
					})
				}
				wg.Go(func() {
					_, err := c.RetryFailed(ctx, failedID)
					assertNoError(t, err)
				})
				wg.Wait()
				eventually(t, 60*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM "+tables.Names()[0]+" WHERE queue = ?", queue) == 0
				}, "every job of the sequence completed")
				l.mu.Lock()
				defer l.mu.Unlock()
				require.Empty(t, l.bad)
				names, ids := l.names["k"], l.ids["k"]
				require.Len(t, names, 2+3*perClient, "each job ran once, the head twice: %v", names)
				require.Equal(t, []string{"head", "head"}, names[:2], "the retried head ran before the rest: %v", names)
				require.IsIncreasing(t, ids[2:], "the rest ran in enqueue order")
				for name, n := range l.runs {
					if name != "head" {
						require.Equal(t, 1, n, "job %s ran once", name)
					}
				}
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"sequences WHERE tail <> 0"))
				require.Zero(t, count(t, db, "SELECT COUNT(*) FROM "+tables.Prefix+"job_deps"))
			})
		}
	})
}
