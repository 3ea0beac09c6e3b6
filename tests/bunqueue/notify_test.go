package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/pgxlisten"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// These tests run several clients, each on a pool of its own as separate
// processes would, in a schema of the test's own (so its own
// notification channel), with a PollInterval of an hour: a job that
// starts during the test was started by a notification, not a poll.

var _ bunqueue.Listener = (*pgxlisten.Listener)(nil)

// noPoll is a poll interval that no test outlasts.
const noPoll = time.Hour

type notifyArgs struct {
	N int `json:"n"`
}

func (notifyArgs) Kind() string { return "notify_test" }

// notifySetup is a test's schema, its pools and what their handlers did.
type notifySetup struct {
	t   *testing.T
	dsn string // of the schema

	mu   sync.Mutex
	runs map[int][]string // job N: the clients that ran it
}

// newNotifySetup makes a schema of the test's own with the jobs tables,
// on PostgreSQL; it skips elsewhere.
func newNotifySetup(t *testing.T) *notifySetup {
	t.Helper()
	if !dbtest.IsPostgres() {
		t.Skip("PostgreSQL only: the other servers have no notifications (BUNQUEUE_TEST_SERVER=postgres)")
	}
	s := &notifySetup{t: t, dsn: dbtest.Scratch(t, "notify"), runs: map[int][]string{}}
	require.NoError(t, bunqueue.Migrate(t.Context(), s.pool()))
	return s
}

// pool opens a pool of its own on the test's schema.
func (s *notifySetup) pool() *bun.DB { return dbtest.OpenDSN(s.t, s.dsn, 0) }

// listener returns a pgxlisten.Listener on the test's server, wrapped to
// record what it does; its connection's application_name is app.
func (s *notifySetup) listener(app string) *testListener {
	cfg, err := pgx.ParseConfig(dbtest.PGDSN())
	require.NoError(s.t, err)
	cfg.RuntimeParams["application_name"] = app
	return &testListener{inner: pgxlisten.NewConfig(cfg), app: app}
}

// worker returns a started client on a pool of its own that runs the jobs
// of queue, named name in s.runs, with l as its Listener (nil for none).
func (s *notifySetup) worker(name, queue string, l bunqueue.Listener, poll time.Duration, logger *slog.Logger) *bunqueue.Client {
	t := s.t
	if logger == nil {
		logger = testLogger(t)
	}
	c, err := bunqueue.NewClient(s.pool(), &bunqueue.Config{
		PollInterval: poll, Logger: logger, Listener: l,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}},
	})
	require.NoError(t, err)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[notifyArgs](func(ctx context.Context, tx bun.IDB, job *bunqueue.Job[notifyArgs]) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.runs[job.Args.N] = append(s.runs[job.Args.N], name)
		return nil
	})))
	start(t, c)
	return c
}

// producer returns a client on a pool of its own that runs no workers.
func (s *notifySetup) producer(queues []string, cfg bunqueue.Config) (*bunqueue.Client, *bun.DB) {
	db := s.pool()
	cfg.Logger = testLogger(s.t)
	cfg.JobQueues = map[string]bunqueue.JobQueueConfig{}
	for _, q := range queues {
		cfg.JobQueues[q] = bunqueue.JobQueueConfig{}
	}
	c, err := bunqueue.NewClient(db, &cfg)
	require.NoError(s.t, err)
	return c, db
}

// listening returns the Listener of a worker client named name (see
// worker) that polls once an hour, once it listens.
func (s *notifySetup) listening(name, queue string) *testListener {
	s.t.Helper()
	l := s.listener(dbtest.Name("notify_" + name))
	s.worker(name, queue, l, noPoll, nil)
	l.waitListening(s.t, 1)
	return l
}

// enqueueInTx enqueues job n into queue through c, in a transaction of
// db that commits, or rolls back if rollback.
func enqueueInTx(t *testing.T, db *bun.DB, c *bunqueue.Client, n int, queue string, rollback bool) {
	t.Helper()
	rolledBack := errors.New("rolled back")
	err := db.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := c.Enqueue(ctx, tx, notifyArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
			return err
		}
		if rollback {
			return rolledBack
		}
		return nil
	})
	if rollback {
		require.ErrorIs(t, err, rolledBack)
	} else {
		require.NoError(t, err)
	}
}

// ran waits until the jobs numbered ns have run, then requires that
// each ran once.
func (s *notifySetup) ran(ns ...int) {
	s.t.Helper()
	eventually(s.t, 15*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, n := range ns {
			if len(s.runs[n]) == 0 {
				return false
			}
		}
		return true
	}, "jobs %v ran", ns)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		require.Len(s.t, s.runs[n], 1, "job %d ran once (by %v)", n, s.runs[n])
	}
}

// testListener wraps a Listener: it counts the calls and the times
// listening began, keeps the payloads, and while down fails every call
// at once, as a server out of reach would.
type testListener struct {
	inner bunqueue.Listener
	app   string // application_name of its connection

	down  atomic.Bool
	calls atomic.Int32
	began atomic.Int32

	mu       sync.Mutex
	payloads []string
}

func (l *testListener) Listen(ctx context.Context, channel string, listening func(), notified func(string)) error {
	l.calls.Add(1)
	if l.down.Load() {
		return errors.New("test: the server is out of reach")
	}
	return l.inner.Listen(ctx, channel, func() {
		l.began.Add(1)
		listening()
	}, func(p string) {
		l.mu.Lock()
		l.payloads = append(l.payloads, p)
		l.mu.Unlock()
		notified(p)
	})
}

// received returns the payloads received so far.
func (l *testListener) received() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.payloads...)
}

// waitListening waits until listening has begun n times.
func (l *testListener) waitListening(t *testing.T, n int32) {
	t.Helper()
	eventually(t, 15*time.Second, func() bool { return l.began.Load() >= n }, "listening began %d times", n)
}

// jobsPayload is the notification of jobs enqueued into queue.
func jobsPayload(queue string) string { return fmt.Sprintf(`{"kind":"jobs","queue":%q}`, queue) }

// A job enqueued through one client starts on the others, woken by the
// notification of its commit: through a *bun.DB, a transaction or
// EnqueueMany.
func TestNotifyWakesOtherClients(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	queue := jobQueue(t)
	var ls []*testListener
	for _, name := range []string{"b", "c"} {
		l := s.listener(dbtest.Name("notify_" + name))
		s.worker(name, queue, l, noPoll, nil)
		ls = append(ls, l)
	}
	for _, l := range ls {
		l.waitListening(t, 1)
	}
	a, db := s.producer([]string{queue}, bunqueue.Config{})
	ctx := t.Context()
	var want []int
	for n := range 10 {
		_, err := a.Enqueue(ctx, db, notifyArgs{N: n}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
		want = append(want, n)
	}
	for n := 10; n < 20; n++ {
		enqueueInTx(t, db, a, n, queue, false)
		want = append(want, n)
	}
	var many []bunqueue.EnqueueParams
	for n := 20; n < 30; n++ {
		many = append(many, bunqueue.EnqueueParams{Args: notifyArgs{N: n}, Opts: &bunqueue.EnqueueOpts{Queue: queue}})
		want = append(want, n)
	}
	inserted, err := a.EnqueueMany(ctx, db, many)
	require.NoError(t, err)
	require.Equal(t, 10, inserted)
	s.ran(want...)
	eventually(t, 15*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the jobs completed")
	for _, l := range ls {
		require.Contains(t, l.received(), jobsPayload(queue))
	}
}

// Nothing is sent for a rolled-back EnqueueTx, a job scheduled for later,
// a duplicate, or a client with NoEnqueueNotify. Notifications come in
// commit order: once the last, committed enqueue's has come, any of
// those would have come before it.
func TestNotifyOnlyCommittedDueJobs(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	queue := jobQueue(t)
	l := s.listening("b", queue)
	a, db := s.producer([]string{queue}, bunqueue.Config{})
	quiet, quietDB := s.producer([]string{queue}, bunqueue.Config{NoEnqueueNotify: true})
	ctx := t.Context()

	enqueueInTx(t, db, a, 100, queue, true)
	_, err := a.Enqueue(ctx, db, notifyArgs{N: 101}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	require.NoError(t, err)
	_, err = quiet.Enqueue(ctx, quietDB, notifyArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "one"})
	require.NoError(t, err)
	res, err := a.Enqueue(ctx, db, notifyArgs{N: 102}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: "one"})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Empty(t, l.received(), "notified before the committed enqueue")

	last, lastDB := s.producer([]string{queue}, bunqueue.Config{}) // its own sender: nothing of a's to merge with
	_, err = last.Enqueue(ctx, lastDB, notifyArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	s.ran(1, 2) // the quiet client's job is found by the read that the notification woke
	require.Equal(t, []string{jobsPayload(queue)}, l.received())
	s.mu.Lock()
	ran := maps.Clone(s.runs)
	s.mu.Unlock()
	require.NotContains(t, ran, 100)
	require.NotContains(t, ran, 101)
	require.NotContains(t, ran, 102)
	eventually(t, 15*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 1
	}, "only the job scheduled for later is left")
}

// notifyStatements counts the statements that notify, run through the
// DB it is added to.
type notifyStatements struct{ n atomic.Int32 }

func (h *notifyStatements) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (h *notifyStatements) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if strings.Contains(e.Query, "pg_notify") {
		h.n.Add(1)
	}
}

// Through the QueryHook, a transaction's enqueue notifies after its
// commit, from the pool, outside the app's transaction (whose commit
// would otherwise wait in the server's line of notifying commits), and
// not at all after a rollback. Without it, the transaction notifies.
func TestNotifyAfterCommitThroughTheQueryHook(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	queue := jobQueue(t)
	l := s.listening("b", queue)
	a, db := s.producer([]string{queue}, bunqueue.Config{})
	inTx := &notifyStatements{}
	appDB := db.WithQueryHook(a.QueryHook()).WithQueryHook(inTx)
	plainDB := db.WithQueryHook(inTx)

	enqueueInTx(t, appDB, a, 100, queue, true)
	enqueueInTx(t, appDB, a, 1, queue, false)
	s.ran(1)
	require.Equal(t, []string{jobsPayload(queue)}, l.received())
	require.Zero(t, inTx.n.Load(), "no statement of the app's transactions notified")

	enqueueInTx(t, plainDB, a, 2, queue, false)
	s.ran(1, 2)
	require.EqualValues(t, 1, inTx.n.Load(), "without the QueryHook, the transaction notified")
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotContains(t, s.runs, 100)
}

// A killed listening connection is opened again with backoff, the outage
// logged once; the jobs enqueued meanwhile start when listening begins
// again, and later ones by their notifications. A client whose listener
// is down polls, as without one.
func TestListenerComesBackAfterItsConnectionIsKilled(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	queue, polled := jobQueue(t), jobQueue(t)
	logger, logs := newLogRecords(t)
	l := s.listener(dbtest.Name("notify_b"))
	s.worker("b", queue, l, noPoll, logger)
	down := s.listener(dbtest.Name("notify_d"))
	down.down.Store(true)
	s.worker("d", polled, down, 100*time.Millisecond, nil)
	l.waitListening(t, 1)
	a, db := s.producer([]string{queue, polled}, bunqueue.Config{})
	ctx := t.Context()

	_, err := a.Enqueue(ctx, db, notifyArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	s.ran(1)

	l.down.Store(true) // calls from now on fail: the server is out of reach
	calls := l.calls.Load()
	var killed bool
	require.NoError(t, db.NewRaw("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?", l.app).Scan(ctx, &killed))
	require.True(t, killed, "the listening connection was found and ended")
	eventually(t, 15*time.Second, func() bool { return l.calls.Load() >= calls+3 }, "Listen called again, and again")

	// Enqueued while nobody listens: no poll for an hour, so it starts
	// when listening begins again.
	_, err = a.Enqueue(ctx, db, notifyArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	// The client whose listener never came up polls.
	_, err = a.Enqueue(ctx, db, notifyArgs{N: 10}, &bunqueue.EnqueueOpts{Queue: polled})
	require.NoError(t, err)
	s.ran(10)
	require.Zero(t, down.began.Load())

	l.down.Store(false)
	l.waitListening(t, 2)
	s.ran(1, 2)
	_, err = a.Enqueue(ctx, db, notifyArgs{N: 3}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	s.ran(1, 2, 3, 10)

	require.Len(t, logs.where(map[string]any{"level": "WARN", "msg": "bunqueue: listening for notifications failed: workers find other processes' jobs by polling every PollInterval until it is back"}), 1,
		"the outage is logged once")
	require.Len(t, logs.where(map[string]any{"level": "INFO", "msg": "bunqueue: listening for notifications again"}), 1)
}

// Rows that the app inserts into a table queue's table start in another
// process when the app calls Client.Notify in its transaction.
func TestNotifyTableQueue(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	db := s.pool()
	createTable(t, db, "notify_items", "id BIGINT AUTO_INCREMENT PRIMARY KEY, done BOOLEAN NOT NULL DEFAULT FALSE")
	type item struct {
		bun.BaseModel `bun:"table:notify_items"`
		ID            int64 `bun:",pk,autoincrement"`
		Done          bool
	}
	var processed atomic.Int32
	q := bunqueue.NewQueue("notify_items", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("done = FALSE").Order("id")
	}, func(ctx context.Context, tx bun.Tx, it *item) error {
		processed.Add(1)
		_, err := tx.NewUpdate().Model(it).Set("done = TRUE").WherePK().Exec(ctx)
		return err
	}, &bunqueue.QueueConfig[item]{PollInterval: noPoll, Workers: 1})
	l := s.listener(dbtest.Name("notify_b"))
	b, err := bunqueue.NewClient(s.pool(), &bunqueue.Config{Logger: testLogger(t), Listener: l})
	require.NoError(t, err)
	require.NoError(t, b.Add(q))
	start(t, b)
	l.waitListening(t, 1)

	a, adb := s.producer(nil, bunqueue.Config{})
	ctx := t.Context()
	require.NoError(t, adb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&item{}).Exec(ctx); err != nil {
			return err
		}
		return a.Notify(ctx, tx, "notify_items")
	}))
	eventually(t, 15*time.Second, func() bool { return processed.Load() == 1 }, "the row was processed")
	require.Equal(t, []string{`{"kind":"rows","queue":"notify_items"}`}, l.received())
	require.Error(t, a.Notify(ctx, adb, ""), "a queue name is needed")
}

// MySQL, MariaDB and SQLite have no notifications: a Listener is refused
// by name, and Notify does nothing.
func TestListenerRefusedWithoutNotifications(t *testing.T) {
	t.Parallel()
	for _, srv := range dbtest.Servers() {
		if srv.Name == "postgres" {
			continue
		}
		t.Run(srv.Name, func(t *testing.T) {
			db := srv.Open(t, 0)
			l := bunqueue.ListenerFunc(func(context.Context, string, func(), func(string)) error { return nil })
			_, err := bunqueue.NewClient(db, &bunqueue.Config{Listener: l})
			require.ErrorContains(t, err, "Config.Listener")
			c, err := bunqueue.NewClient(db, nil)
			require.NoError(t, err)
			require.NoError(t, c.Notify(t.Context(), db, "any"))
		})
	}
}

// A pause reaches a listening client by its signal, long before its next
// read of the flags (an hour away here): a job enqueued while paused
// waits, and the resume's signal starts it.
func TestNotifyCarriesPauseAndResume(t *testing.T) {
	t.Parallel()
	s := newNotifySetup(t)
	queue := jobQueue(t)
	l := s.listening("b", queue)
	a, db := s.producer([]string{queue}, bunqueue.Config{})
	ctx := t.Context()
	require.NoError(t, a.PauseQueue(ctx, queue))
	pausePayload := fmt.Sprintf(`{"kind":"pause","queue":%q}`, queue)
	eventually(t, 15*time.Second, func() bool { return slices.Contains(l.received(), pausePayload) }, "the pause's signal came")
	_, err := a.Enqueue(ctx, db, notifyArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() bool { return slices.Contains(l.received(), jobsPayload(queue)) }, "the job's signal came")
	time.Sleep(200 * time.Millisecond) // what a woken worker would take to start it
	s.mu.Lock()
	require.Empty(t, s.runs, "a job of the paused queue ran")
	s.mu.Unlock()
	require.NoError(t, a.ResumeQueue(ctx, queue))
	s.ran(1)
	require.Contains(t, l.received(), fmt.Sprintf(`{"kind":"resume","queue":%q}`, queue))
}
