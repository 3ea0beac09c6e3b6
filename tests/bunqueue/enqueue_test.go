package bunqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// stmtLog is a bun query hook that records the statements of a pool: the
// text of short ones, the start of long ones, and their length.
type stmtLog struct {
	mu    sync.Mutex
	stmts []loggedStmt
}

type loggedStmt struct {
	head string // the whole statement up to 4 KiB, else the first 200 bytes
	size int
}

func (h *stmtLog) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (h *stmtLog) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	head := e.Query
	if len(head) > 4096 {
		head = head[:200]
	}
	h.stmts = append(h.stmts, loggedStmt{head: head, size: len(e.Query)})
}

// matching returns the statements that start with prefix, and forgets all.
func (h *stmtLog) matching(prefix string) []loggedStmt {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedStmt
	for _, s := range h.stmts {
		if strings.HasPrefix(s.head, prefix) {
			out = append(out, s)
		}
	}
	h.stmts = nil
	return out
}

func maxAllowedPacket(t *testing.T, db bun.IDB) int {
	t.Helper()
	n, err := dialectOf(db).MaxStatement(t.Context(), db)
	require.NoError(t, err)
	return n
}

type txEnqueueArgs struct {
	Marker string `json:"marker"`
}

func (txEnqueueArgs) Kind() string { return "t_enqueue_tx" }

// A job enqueued through the transaction of a business write exists if
// and only if that transaction commits: committed, it runs once (and sees
// the business row); rolled back, it never exists and never runs.
func TestEnqueueInTransaction(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	table := dbtest.Name("bq_test_enqtx")
	createTable(t, db, table, "id BIGINT AUTO_INCREMENT PRIMARY KEY, marker VARCHAR(32) NOT NULL")
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}}})
	var mu sync.Mutex
	runs := map[string]int{}
	var metaSeen map[string]string
	var businessSeen int
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[txEnqueueArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[txEnqueueArgs]) error {
		var n int
		if err := db.NewRaw("SELECT COUNT(*) FROM ? WHERE marker = ?", bun.Ident(table), job.Args.Marker).Scan(ctx, &n); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		runs[job.Args.Marker]++
		metaSeen, businessSeen = job.Metadata, n
		return nil
	})))
	start(t, c)
	ctx := t.Context()

	var committed int64
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewRaw("INSERT INTO ? (marker) VALUES ('committed')", bun.Ident(table)).Exec(ctx)
		require.NoError(t, err)
		res, err := c.Enqueue(ctx, tx, txEnqueueArgs{Marker: "committed"}, &bunqueue.EnqueueOpts{Queue: queue, Metadata: map[string]string{"trace": "t1"}})
		require.NoError(t, err)
		committed = res.ID
		require.False(t, jobExists(t, db, res.ID), "the job is not visible before the commit")
		time.Sleep(200 * time.Millisecond) // workers poll every 20 ms
		mu.Lock()
		defer mu.Unlock()
		require.Zero(t, runs["committed"], "the job ran before its transaction committed")
		return nil
	}))
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, committed) }, "the committed job runs")

	var rolledBack int64
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewRaw("INSERT INTO ? (marker) VALUES ('rolled back')", bun.Ident(table)).Exec(ctx)
		require.NoError(t, err)
		res, err := c.Enqueue(ctx, tx, txEnqueueArgs{Marker: "rolled back"}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
		rolledBack = res.ID
		require.Equal(t, 1, count(t, tx, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", res.ID), "the transaction sees its job")
		return errors.New("t_enqueue_tx: business rule says no")
	})
	require.ErrorContains(t, err, "business rule says no")
	require.NotZero(t, rolledBack)
	require.False(t, jobExists(t, db, rolledBack), "the rolled-back job does not exist")
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM ?", bun.Ident(table)))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"committed": 1}, runs, "the committed job ran once, the rolled-back one never")
	require.Equal(t, map[string]string{"trace": "t1"}, metaSeen)
	require.Equal(t, 1, businessSeen, "the worker sees the business row committed with its job")
}

type enqueueErrArgs struct {
	N int `json:"n"`
}

func (enqueueErrArgs) Kind() string { return "t_enqueue_err" }

type chanArgs struct {
	C chan int `json:"c"`
}

func (chanArgs) Kind() string { return "t_enqueue_chan" }

type funcArgs struct {
	F func() `json:"f"`
}

func (funcArgs) Kind() string { return "t_enqueue_func" }

type marshalErrArgs struct{}

func (marshalErrArgs) Kind() string { return "t_enqueue_marshal" }

func (marshalErrArgs) MarshalJSON() ([]byte, error) {
	return nil, errors.New("t_enqueue_marshal: cannot encode")
}

type longKindArgs struct{}

func (longKindArgs) Kind() string { return strings.Repeat("k", 256) }

// Enqueue and EnqueueMany refuse a bad job with an error that says what is
// wrong, and insert nothing; the limits themselves are accepted.
func TestEnqueueRejectsBadJobs(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	other := jobQueue(t) // not in JobQueues
	t.Cleanup(func() { deleteJobQueueRows(db, other) })
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	opts := func(o bunqueue.EnqueueOpts) *bunqueue.EnqueueOpts {
		if o.Queue == "" {
			o.Queue = queue
		}
		return &o
	}
	for _, tc := range []struct {
		name string
		args bunqueue.JobArgs
		opts *bunqueue.EnqueueOpts
		want []string
	}{
		{"unknown queue", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{Queue: other}), []string{"unknown queue", other, "Config.JobQueues"}},
		{"default queue not configured", enqueueErrArgs{}, nil, []string{"unknown queue", `"default"`}},
		{"nil args", nil, opts(bunqueue.EnqueueOpts{}), []string{"args must not be nil"}},
		{"chan field", chanArgs{C: make(chan int)}, opts(bunqueue.EnqueueOpts{}), []string{"t_enqueue_chan", "encode args as JSON", "unsupported type"}},
		{"func field", funcArgs{F: func() {}}, opts(bunqueue.EnqueueOpts{}), []string{"t_enqueue_func", "encode args as JSON", "unsupported type"}},
		{"failing marshaler", marshalErrArgs{}, opts(bunqueue.EnqueueOpts{}), []string{"t_enqueue_marshal", "encode args as JSON", "cannot encode"}},
		{"long kind", longKindArgs{}, opts(bunqueue.EnqueueOpts{}), []string{"Kind() must return 1 to 255 bytes"}},
		{"RunAt and Delay", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{RunAt: time.Now(), Delay: time.Second}), []string{"RunAt or EnqueueOpts.Delay, not both"}},
		{"negative Delay", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{Delay: -time.Second}), []string{"Delay must not be negative", "-1s"}},
		{"priority too high", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{Priority: 32768}), []string{"Priority must be within -32768..32767", "32768"}},
		{"priority too low", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{Priority: -32769}), []string{"Priority must be within -32768..32767", "-32769"}},
		{"negative MaxAttempts", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{MaxAttempts: -1}), []string{"MaxAttempts must not be negative"}},
		{"long UniqueKey", enqueueErrArgs{}, opts(bunqueue.EnqueueOpts{UniqueKey: strings.Repeat("u", 256)}), []string{"UniqueKey must have at most 255 bytes", "256"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Enqueue(t.Context(), db, tc.args, tc.opts)
			require.Error(t, err)
			require.Zero(t, res)
			require.Contains(t, err.Error(), "bunqueue: enqueue")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			n, err := c.EnqueueMany(t.Context(), db, []bunqueue.EnqueueParams{
				{Args: enqueueErrArgs{N: 1}, Opts: opts(bunqueue.EnqueueOpts{})},
				{Args: tc.args, Opts: tc.opts},
			})
			require.Error(t, err)
			require.Zero(t, n)
			require.Contains(t, err.Error(), "EnqueueMany: job 1")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	for _, q := range []string{queue, other, bunqueue.QueueDefault} {
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND kind LIKE 't\\_enqueue\\_%'", q), "nothing was inserted in %s", q)
	}

	// The limits themselves are accepted and stored as given.
	key := queue + strings.Repeat("u", 255-len(queue))
	for _, o := range []bunqueue.EnqueueOpts{{Priority: 32767}, {Priority: -32768}, {UniqueKey: key}} {
		o.Queue = queue
		res, err := c.Enqueue(t.Context(), db, enqueueErrArgs{}, &o)
		require.NoError(t, err)
		require.Equal(t, o.Priority, count(t, db, "SELECT priority FROM bunqueue_jobs WHERE id = ?", res.ID))
	}
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE unique_key = ?", key))
}

type bigArgs struct {
	S string `json:"s"`
}

func (bigArgs) Kind() string { return "t_enqueue_big" }

// A payload that cannot fit in the server's max_allowed_packet is refused
// with a clear error and nothing is inserted; the largest payload the
// check lets through is stored whole, and survives the trip to the failed
// jobs and back.
func TestEnqueuePayloadLimit(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	ctx := t.Context()
	packet := maxAllowedPacket(t, db)
	opts := &bunqueue.EnqueueOpts{Queue: queue}

	_, err := c.Enqueue(ctx, db, bigArgs{S: strings.Repeat("x", packet+1000)}, opts)
	require.Error(t, err)
	require.Contains(t, err.Error(), "max_allowed_packet")
	require.Contains(t, err.Error(), fmt.Sprint(packet))
	n, err := c.EnqueueMany(ctx, db, []bunqueue.EnqueueParams{
		{Args: bigArgs{S: "small"}, Opts: opts},
		{Args: bigArgs{S: strings.Repeat("x", packet+1000)}, Opts: opts},
	})
	require.ErrorContains(t, err, "max_allowed_packet")
	require.Zero(t, n)
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "nothing was inserted")

	// Args are sent as hex, two bytes of SQL per byte, with 1 KiB for the
	// rest of the statement: this is the largest payload that passes.
	overhead := len(`{"s":""}`)
	fit := bigArgs{S: strings.Repeat("y", (packet-1024)/2-overhead)}
	_, err = c.Enqueue(ctx, db, bigArgs{S: fit.S + "y"}, opts)
	require.ErrorContains(t, err, "max_allowed_packet", "one byte more is refused")
	raw, err := json.Marshal(fit)
	require.NoError(t, err)
	res, err := c.Enqueue(ctx, db, fit, opts)
	require.NoError(t, err, "the largest payload the check accepts must fit the packet")
	require.Equal(t, len(raw), count(t, db, "SELECT LENGTH(args) FROM bunqueue_jobs WHERE id = ?", res.ID))
	require.Equal(t, 1, count(t, db, "SELECT CASE WHEN args = ? THEN 1 ELSE 0 END FROM bunqueue_jobs WHERE id = ?", raw, res.ID))

	// Failed and retried, it is sent once more: it must fit again.
	dbtest.Exec(t, db, fmt.Sprintf(`INSERT INTO bunqueue_failed_jobs
	(job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, error, created_at, failed_at)
SELECT id, queue, kind, args, metadata, priority, 1, max_attempts, unique_key, 'too big', created_at, %s
FROM bunqueue_jobs WHERE id = %d`, nowSQL(db), res.ID), fmt.Sprintf("DELETE FROM bunqueue_jobs WHERE id = %d", res.ID))
	f, ok := failedByJobID(t, db, res.ID)
	require.True(t, ok)
	newID, err := c.RetryFailed(ctx, f.ID)
	require.NoError(t, err)
	require.Equal(t, 1, count(t, db, "SELECT CASE WHEN args = ? THEN 1 ELSE 0 END FROM bunqueue_jobs WHERE id = ?", raw, newID))
}

type scheduleArgs struct {
	N int `json:"n"`
}

func (scheduleArgs) Kind() string { return "t_enqueue_schedule" }

// Delay schedules the job that long after now by the database clock (also
// when the session's time_zone is not UTC); RunAt is stored in UTC
// whatever its Location, to the microsecond; the worker gets RunAt back in
// UTC.
func TestEnqueueSchedule(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	ctx := t.Context()

	// A pool whose sessions are in another time zone.
	var tokyo *bun.DB
	if isPG(db) {
		tokyo = dbtest.OpenSession(t, 0, map[string]string{"TimeZone": "Asia/Tokyo"})
		require.Equal(t, "Asia/Tokyo", str(t, tokyo, "SELECT current_setting('TimeZone')"))
	} else {
		tokyo = dbtest.OpenSession(t, 0, map[string]string{"time_zone": "'+09:00'"})
		require.Equal(t, "+09:00", str(t, tokyo, "SELECT @@session.time_zone"))
	}

	type stored struct {
		Delay int64 // run_at - created_at, µs
		Age   int64 // UTC_TIMESTAMP(6) - created_at, µs
		RunAt string
	}
	read := func(id int64) stored {
		var s stored
		format := "DATE_FORMAT(run_at, '%Y-%m-%d %H:%i:%s.%f')"
		if isPG(db) {
			format = "to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
		}
		require.NoError(t, db.NewRaw(`SELECT `+diffSQL(db, "MICROSECOND", "created_at", "run_at")+`,
	`+diffSQL(db, "MICROSECOND", "created_at", nowSQL(db))+`, `+format+`
FROM bunqueue_jobs WHERE id = ?`, id).Scan(ctx, &s.Delay, &s.Age, &s.RunAt))
		return s
	}
	delay := time.Hour + 2*time.Minute + 3456789*time.Microsecond
	for name, through := range map[string]bun.IDB{"utc": db, "tokyo": tokyo} {
		id := enqueueOne(t, c, through, scheduleArgs{}, &bunqueue.EnqueueOpts{Queue: queue, Delay: delay})
		s := read(id)
		require.Equal(t, delay.Microseconds(), s.Delay, "%s: run_at is created_at + Delay", name)
		require.GreaterOrEqual(t, s.Age, int64(0), "%s: created_at is by the database's UTC clock", name)
		require.Less(t, s.Age, (5 * time.Second).Microseconds(), "%s: created_at is by the database's UTC clock", name)

		id = enqueueOne(t, c, through, scheduleArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
		s = read(id)
		require.Zero(t, s.Delay, "%s: without RunAt or Delay, run_at is now", name)
		require.Less(t, s.Age, (5 * time.Second).Microseconds())

		for _, loc := range []*time.Location{time.UTC, time.FixedZone("UTC+05:30", 5*3600+30*60), time.FixedZone("UTC-07", -7*3600)} {
			runAt := time.Date(2031, 3, 4, 5, 6, 7, 891234567, loc)
			id := enqueueOne(t, c, through, scheduleArgs{}, &bunqueue.EnqueueOpts{Queue: queue, RunAt: runAt})
			require.Equal(t, runAt.UTC().Format("2006-01-02 15:04:05.000000"), read(id).RunAt, "%s: RunAt in %s", name, loc)
		}
	}
	dbtest.Exec(t, db, fmt.Sprintf("DELETE FROM bunqueue_jobs WHERE queue = '%s'", queue))

	// Due jobs run; the worker gets RunAt in UTC.
	var mu sync.Mutex
	got := map[int]time.Time{}
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[scheduleArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[scheduleArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		got[job.Args.N] = job.RunAt
		return nil
	})))
	past := time.Date(2020, 1, 2, 3, 4, 5, 678901000, time.FixedZone("UTC+05:30", 5*3600+30*60))
	enqueueOne(t, c, db, scheduleArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, RunAt: past})
	enqueueOne(t, c, db, scheduleArgs{N: 2}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	}, "the due job runs")
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "the delayed job is not due")
	require.True(t, got[1].Equal(past), "Job.RunAt %s, want %s", got[1], past)
	requireUTC(t, got[1], "Job.RunAt")
}

// openDSN opens a pool on dsn, closed when the test ends.
func openDSN(t *testing.T, dsn string, maxConns int) *bun.DB {
	t.Helper()
	return dbtest.OpenDSN(t, dsn, maxConns)
}

type uniqueArgs struct {
	N int `json:"n"`
}

func (uniqueArgs) Kind() string { return "t_enqueue_unique" }

// Ten producers enqueue the same UniqueKey at once: one job is inserted,
// the nine others are told it is a duplicate and get its id. Once the job
// completes, the key can be enqueued again.
func TestEnqueueUniqueKeyConcurrent(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	key := queue + "-same"
	opts := &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key}
	const producers = 10
	results := make([]bunqueue.EnqueueResult, producers)
	errs := make([]error, producers)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i], errs[i] = c.Enqueue(context.Background(), db, uniqueArgs{N: i}, opts)
		}()
	}
	close(gate)
	wg.Wait()
	winner := -1
	for i := range producers {
		require.NoError(t, errs[i])
		require.Equal(t, results[0].ID, results[i].ID, "every producer gets the one job's id")
		if !results[i].Duplicate {
			require.Equal(t, -1, winner, "two producers inserted")
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "one producer inserted")
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))
	var args uniqueArgs
	require.NoError(t, json.Unmarshal([]byte(str(t, db, fmt.Sprintf("SELECT args FROM bunqueue_jobs WHERE id = %d", results[0].ID))), &args))
	require.Equal(t, winner, args.N, "the stored job is the winner's")

	// Through a transaction too.
	require.NoError(t, db.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := c.Enqueue(ctx, tx, uniqueArgs{N: 99}, opts)
		require.NoError(t, err)
		require.Equal(t, bunqueue.EnqueueResult{ID: results[0].ID, Duplicate: true}, res)
		return nil
	}))

	var runs atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[uniqueArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[uniqueArgs]) error {
		runs.Add(1)
		return nil
	})))
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, results[0].ID) }, "the job completes")
	res, err := c.Enqueue(t.Context(), db, uniqueArgs{N: 100}, opts)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the key is free once the job completed")
	require.NotEqual(t, results[0].ID, res.ID)
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, db, res.ID) }, "the second job completes")
	require.EqualValues(t, 2, runs.Load())
}

type manyArgs struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

func (manyArgs) Kind() string { return "t_enqueue_many" }

// EnqueueMany inserts many jobs in few multi-row statements, each within
// max_allowed_packet, in order, and returns how many it inserted: jobs
// whose UniqueKey is pending (or repeated in the call) are skipped. One
// invalid job makes it insert nothing. Through a transaction that rolls
// back, nothing stays.
func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	ctx := t.Context()
	hooked := dbtest.Open(t, 0)
	var log stmtLog
	hooked.AddQueryHook(&log)
	const insert = "INSERT INTO bunqueue_jobs "
	jobsOf := func(where string) int {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? "+where, queue)
	}

	n, err := c.EnqueueMany(ctx, hooked, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	const many = 2500
	jobs := make([]bunqueue.EnqueueParams, many)
	for i := range jobs {
		jobs[i] = bunqueue.EnqueueParams{Args: manyArgs{N: i}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Priority: i % 7}}
	}
	log.matching("")
	n, err = c.EnqueueMany(ctx, hooked, jobs)
	require.NoError(t, err)
	require.Equal(t, many, n)
	require.Len(t, log.matching(insert), 3, "2500 jobs in three statements of at most 1000 rows")
	require.Equal(t, many, jobsOf(""))
	var stored []manyArgs
	var argsJSON [][]byte
	require.NoError(t, db.NewRaw("SELECT args FROM bunqueue_jobs WHERE queue = ? ORDER BY id", queue).Scan(ctx, &argsJSON))
	for _, a := range argsJSON {
		var m manyArgs
		require.NoError(t, json.Unmarshal(a, &m))
		stored = append(stored, m)
	}
	for i, m := range stored {
		require.Equal(t, i, m.N, "jobs are inserted in order")
	}
	require.Equal(t, many/7+1, jobsOf("AND priority = 0"))
	dbtest.Exec(t, db, fmt.Sprintf("DELETE FROM bunqueue_jobs WHERE queue = '%s'", queue))

	// Duplicates by UniqueKey are skipped, and not counted.
	k1, k2 := queue+"-k1", queue+"-k2"
	pending := enqueueOne(t, c, db, manyArgs{N: -1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: k1})
	key := func(k string) *bunqueue.EnqueueOpts { return &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: k} }
	n, err = c.EnqueueMany(ctx, hooked, []bunqueue.EnqueueParams{
		{Args: manyArgs{N: 1}, Opts: key(k1)},
		{Args: manyArgs{N: 2}, Opts: key(k2)},
		{Args: manyArgs{N: 3}, Opts: key(k2)},
		{Args: manyArgs{N: 4}, Opts: key("")},
		{Args: manyArgs{N: 5}, Opts: &bunqueue.EnqueueOpts{Queue: queue}},
	})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, 4, jobsOf(""))
	require.Equal(t, 1, jobsOf(fmt.Sprintf("AND id = %d AND args = '{\"n\":-1}'", pending)), "the pending job is left as it was")
	require.Equal(t, 1, jobsOf(fmt.Sprintf("AND unique_key = '%s' AND args = '{\"n\":2}'", k2)), "the first of a repeated key wins")

	// An invalid job anywhere: nothing is inserted.
	before := jobsOf("")
	log.matching("")
	valid := bunqueue.EnqueueParams{Args: manyArgs{N: 7}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	jobs = []bunqueue.EnqueueParams{valid, valid}
	for range 1500 {
		jobs = append(jobs, valid)
	}
	jobs = append(jobs, bunqueue.EnqueueParams{Args: manyArgs{N: 8}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Priority: 99999}})
	n, err = c.EnqueueMany(ctx, hooked, jobs)
	require.ErrorContains(t, err, fmt.Sprintf("job %d", len(jobs)-1))
	require.ErrorContains(t, err, "Priority")
	require.Zero(t, n)
	require.Empty(t, log.matching(insert), "no statement was sent")
	require.Equal(t, before, jobsOf(""))

	// Through a transaction that rolls back, nothing stays.
	require.Error(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		n, err := c.EnqueueMany(ctx, tx, jobs[:1200])
		require.NoError(t, err)
		require.Equal(t, 1200, n)
		return errors.New("roll back")
	}))
	require.Equal(t, before, jobsOf(""))

	// Large payloads: each statement stays within max_allowed_packet.
	packet := maxAllowedPacket(t, db)
	big := strings.Repeat("b", packet/6)
	jobs = nil
	for i := range 5 {
		jobs = append(jobs, bunqueue.EnqueueParams{Args: manyArgs{N: 100 + i, S: big}, Opts: &bunqueue.EnqueueOpts{Queue: queue}})
	}
	log.matching("")
	n, err = c.EnqueueMany(ctx, hooked, jobs)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	stmts := log.matching(insert)
	require.Len(t, stmts, 3, "two rows of %d hex bytes per statement", 2*len(big))
	for _, s := range stmts {
		require.Less(t, s.size, packet)
	}
	raw, err := json.Marshal(manyArgs{N: 100, S: big})
	require.NoError(t, err)
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND args = ?", queue, raw), "stored whole")
	require.Equal(t, 5, jobsOf(fmt.Sprintf("AND LENGTH(args) = %d", len(raw))))
}

type uniqueRunningArgs struct {
	N int `json:"n"`
}

func (uniqueRunningArgs) Kind() string { return "t_enqueue_unique_running" }

// While a lock-mode job runs, enqueueing its UniqueKey again returns the
// running job as a duplicate at once: the producer does not wait for the
// job's transaction.
func TestEnqueueUniqueKeyWhileRunning(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[uniqueRunningArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[uniqueRunningArgs]) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return nil
	})))
	opts := &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: queue + "-running"}
	id := enqueueOne(t, c, db, uniqueRunningArgs{N: 1}, opts)
	start(t, c)
	<-started
	defer close(release)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	began := time.Now()
	res, err := c.Enqueue(ctx, db, uniqueRunningArgs{N: 2}, opts)
	took := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, bunqueue.EnqueueResult{ID: id, Duplicate: true}, res)
	require.Less(t, took, time.Second, "Enqueue waited for the running job's transaction")
}
