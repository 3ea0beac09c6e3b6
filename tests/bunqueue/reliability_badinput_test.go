package bunqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Scenario 6: bad input. Each bad item or setting gets a clear error, no
// good item is lost, and the good items keep flowing meanwhile.

type relPanicArgs struct{}

func (relPanicArgs) Kind() string { return "bq_rel_panic" }

type relHangArgs struct{}

func (relHangArgs) Kind() string { return "bq_rel_hang" }

type relHangSQLArgs struct{}

func (relHangSQLArgs) Kind() string { return "bq_rel_hang_sql" }

type relUnknownArgs struct{}

func (relUnknownArgs) Kind() string { return "bq_rel_unknown" }

type relBigArgs struct {
	Blob string `json:"blob"`
}

func (relBigArgs) Kind() string { return "bq_rel_big" }

func TestReliabilityBadInput(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	t.Run("jobs, lock mode", func(t *testing.T) { relBadJobs(t, admin, bunqueue.ModeLock) })
	t.Run("jobs, lease mode", func(t *testing.T) { relBadJobs(t, admin, bunqueue.ModeLease) })
	t.Run("any table", func(t *testing.T) { relBadTable(t, admin) })
	t.Run("configuration", func(t *testing.T) { relBadConfig(t, admin) })
}

// relBadJobs: a corrupt payload, a kind without a worker, a worker that
// panics, one that never returns (until its context ends: Timeout), one
// that hangs in SQL (lock mode), and a payload larger than
// max_allowed_packet, among good jobs.
func relBadJobs(t *testing.T, admin *bun.DB, mode bunqueue.JobMode) {
	good := relSize(200, 2000)
	const timeout = 300 * time.Millisecond
	queue := ownJobQueue(t, admin)
	effects := relEffectsTable(t, admin, "bq_rel_bad_eff")
	var rec relRecorder
	c := jobsTestClient(t, dbtest.Open(t, 0), bunqueue.Config{
		Backoff:   fastBackoff,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 4, Mode: mode, Lease: 3 * time.Second, Timeout: timeout}},
	})
	var hangs atomic.Int64
	require.NoError(t, errors.Join(
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[relJobArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relJobArgs]) error {
			defer rec.begin(job.Args.N, 0, "client")()
			_, err := db.NewRaw("INSERT INTO ? (item) VALUES (?)", bun.Ident(effects), job.Args.N).Exec(ctx)
			return err
		})),
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[relPanicArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relPanicArgs]) error {
			panic("poison (test)")
		})),
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[relHangArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relHangArgs]) error {
			hangs.Add(1)
			<-ctx.Done() // never returns on its own
			return ctx.Err()
		})),
		bunqueue.AddWorker(c, bunqueue.WorkerFunc[relHangSQLArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relHangSQLArgs]) error {
			hangs.Add(1)
			_, err := db.NewRaw(dbtest.Sleep(30)).Exec(ctx)
			return err
		})),
	))
	rep := &relReport{Scenario: "bad input", Mode: "jobs, " + mode.String() + " mode", Enqueued: good}

	// Too big: refused at enqueue, nothing inserted.
	packet := maxAllowedPacket(t, admin)
	_, err := c.Enqueue(t.Context(), admin, relBigArgs{Blob: strings.Repeat("x", packet)}, &bunqueue.EnqueueOpts{Queue: queue})
	require.ErrorContains(t, err, "max_allowed_packet")
	require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue), "the oversized job was not inserted")
	rep.BadInputs++

	bad := map[int64]string{} // job id → what its failure must say
	bad[insertRawJob(t, admin, queue, relJobArgs{}.Kind(), []byte("not json {\x00\xff"), nil, 0, 2)] = "decode the args"
	opts := &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2}
	bad[enqueueOne(t, c, admin, relUnknownArgs{}, opts)] = `no worker for kind "bq_rel_unknown"`
	bad[enqueueOne(t, c, admin, relPanicArgs{}, opts)] = "handler panicked: poison (test)"
	bad[enqueueOne(t, c, admin, relHangArgs{}, opts)] = context.DeadlineExceeded.Error()
	if mode == bunqueue.ModeLock {
		bad[enqueueOne(t, c, admin, relHangSQLArgs{}, opts)] = context.DeadlineExceeded.Error()
	}
	rep.BadInputs += len(bad)
	jobs := make([]bunqueue.EnqueueParams, good)
	for i := range jobs {
		jobs[i] = bunqueue.EnqueueParams{Args: relJobArgs{N: int64(i + 1)}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	}
	_, err = c.EnqueueMany(t.Context(), admin, jobs)
	require.NoError(t, err)

	began := time.Now()
	start(t, c)
	done := relWaitFor(relSize(time.Minute, 5*time.Minute), func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	})
	rep.Duration = time.Since(began)
	require.True(t, done, "every job completed or failed; left: %d", count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))

	for id, want := range bad {
		f, ok := failedByJobID(t, admin, id)
		require.True(t, ok, "job %d (%s) is in the failed jobs", id, want)
		require.Contains(t, f.Error, want)
		if strings.Contains(want, "panicked") {
			require.Contains(t, f.Error, "goroutine", "the panic's stack is kept")
		}
		wantAttempts := 2
		if want == "decode the args" {
			wantAttempts = 1 // retrying cannot help
		}
		require.Equal(t, wantAttempts, f.Attempts, "job %d (%s)", id, want)
	}
	require.Equal(t, len(bad), count(t, admin, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue), "only the bad jobs failed")
	require.GreaterOrEqual(t, hangs.Load(), int64(2), "the hanging workers ran")

	rep.Processed, rep.Twice = relEffects(t, admin, effects)
	rep.Lost = good - rep.Processed
	rep.TwiceOK = mode == bunqueue.ModeLease
	var examples []string
	rep.Concurrent, examples = relOverlaps(rec.all(), nil)
	hungSQL := ""
	if mode == bunqueue.ModeLock {
		hungSQL = ", a worker hung in SQL"
	}
	rep.note("corrupt payload, kind without a worker, panic, a worker that never returns (Timeout %s)%s, payload over max_allowed_packet: each failed with its own error; the good jobs kept flowing",
		timeout, hungSQL)
	rep.log(t)
	require.Zero(t, rep.Lost)
	require.Zero(t, rep.Concurrent, examples)
	if !rep.TwiceOK {
		require.Zero(t, rep.Twice)
	}
}

// relBadTable: an any-table queue where some rows panic, one handler
// never returns until its context ends and one hangs in SQL, with the
// queue's Timeout. Each fails through OnError with its own error; the
// other rows keep flowing; Stop finds nothing hung; nothing is lost.
func relBadTable(t *testing.T, admin *bun.DB) {
	items := relSize(300, 3000)
	const timeout = 300 * time.Millisecond
	w := newRelWorkload(t, admin, "table")
	w.work = time.Millisecond
	w.timeout = timeout
	var hangs atomic.Int64
	require.NoError(t, w.produce(0, items))
	// Every 50th row of the run panics; its 8th never returns on its own,
	// its 10th hangs in SQL.
	var runIDs []int64
	require.NoError(t, admin.NewRaw("SELECT id FROM bq_rel_item WHERE run = ? ORDER BY id", w.run).Scan(t.Context(), &runIDs))
	require.Len(t, runIDs, items)
	poisoned := map[int64]bool{}
	for i := 0; i < items; i += 50 {
		poisoned[runIDs[i]] = true
	}
	poison := len(poisoned)
	hangID, hangSQLID := runIDs[7], runIDs[9]
	w.fail = func(ctx context.Context, db bun.IDB, item int64) error {
		switch item {
		case hangID:
			hangs.Add(1)
			<-ctx.Done()
			return ctx.Err()
		case hangSQLID:
			hangs.Add(1)
			_, err := db.NewRaw(dbtest.Sleep(30)).Exec(ctx)
			return err
		}
		if poisoned[item] {
			panic(fmt.Sprintf("poison row %d (test)", item))
		}
		return nil
	}

	var mu sync.Mutex
	causes := map[int64][]string{}
	onError := func(ctx context.Context, tx bun.Tx, it *relFaultItem, cause error) error {
		mu.Lock()
		causes[it.ID] = append(causes[it.ID], cause.Error())
		mu.Unlock()
		// status first, from the old attempts: MySQL's SET sees the
		// columns it already set, PostgreSQL's the row as it was.
		_, err := tx.NewUpdate().Model(it).
			Set("status = CASE WHEN attempts >= 1 THEN 'failed' ELSE status END").
			Set("attempts = attempts + 1").
			Set("retry_at = " + plusSQL(tx, 50*time.Millisecond)).WherePK().Exec(ctx)
		return err
	}
	bad := poison + 2
	rep := &relReport{Scenario: "bad input", Mode: "any table", BadInputs: bad}
	began := time.Now()
	c := w.addClient(dbtest.Open(t, 0), 4, 1, bunqueue.Config{}, onError)
	start(t, c)
	flowed := relWaitFor(time.Minute, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'done'", w.run) == items-bad &&
			count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'failed'", w.run) == bad
	})
	require.True(t, flowed, "the other rows flowed, the bad rows failed")
	rep.Duration = time.Since(began)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "no handler is left hanging")
	require.Empty(t, relLocked(t, admin, "SELECT id FROM bq_rel_item WHERE run = ?", w.run), "no row is left locked")
	w.stop()
	require.GreaterOrEqual(t, hangs.Load(), int64(4), "each hanging row ran twice")
	mu.Lock()
	for _, id := range []int64{hangID, hangSQLID} {
		require.Len(t, causes[id], 2, "row %d: one failure per attempt", id)
		for _, cause := range causes[id] {
			require.Contains(t, cause, "timed out after "+timeout.String(), "row %d", id)
		}
	}
	mu.Unlock()
	rep.note("%d panicking rows, a handler that never returns until its context ends and one hung in SQL (QueueConfig.Timeout %s): each failed after 2 attempts through OnError, with its own error; the other rows kept flowing", poison, timeout)
	w.check(rep, items, nil)
	require.Equal(t, bad, count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'failed' AND attempts = 2", w.run))
}

type relNoPK struct {
	bun.BaseModel `bun:"table:bq_rel_item"`
	Run           string
	Status        string
}

type relMissingTable struct {
	bun.BaseModel `bun:"table:bq_rel_missing_table"`
	ID            int64 `bun:",pk"`
	Status        string
}

// relBadConfig: a bad DSN, a database that is not there or not reachable
// (refused, or a peer that never answers), a missing table, a queue
// query with an SQL error, a model without a primary key.
func relBadConfig(t *testing.T, admin *bun.DB) {
	dbtest.OnlyMySQL(t, "the bad DSNs, and the silent peer, are the MySQL driver's")
	rep := &relReport{Scenario: "bad input", Mode: "configuration"}
	began := time.Now()
	startWithin := func(db *bun.DB, within time.Duration, queues ...bunqueue.AnyQueue) error {
		t.Helper()
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
		require.NoError(t, err)
		for _, q := range queues {
			require.NoError(t, c.Add(q))
		}
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		t0 := time.Now()
		err = c.Start(ctx)
		require.Less(t, time.Since(t0), within+2*time.Second, "Start returned within its context")
		require.NoError(t, c.Stop(context.Background()))
		return err
	}
	openDSN := func(edit func(*mysql.Config)) *bun.DB {
		cfg, err := mysql.ParseDSN(dbtest.DSN())
		require.NoError(t, err)
		edit(cfg)
		sqldb, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		db := bun.NewDB(sqldb, mysqldialect.New())
		t.Cleanup(func() { _ = db.Close() })
		return db
	}

	// A DSN that does not parse: the driver says so when it is opened.
	_, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306/test")
	require.ErrorContains(t, err, "invalid DSN")
	rep.BadInputs++

	// A database that does not exist.
	err = startWithin(openDSN(func(c *mysql.Config) { c.DBName = "bq_rel_no_such_db" }), 10*time.Second)
	require.ErrorContains(t, err, "Unknown database 'bq_rel_no_such_db'")
	rep.BadInputs++

	// Nothing listening: refused at once.
	refused := openDSN(func(c *mysql.Config) { c.Addr = "127.0.0.1:1" })
	err = startWithin(refused, 10*time.Second)
	require.ErrorContains(t, err, "connection refused")
	require.ErrorContains(t, bunqueue.Migrate(t.Context(), refused), "connection refused")
	rep.BadInputs++

	// A peer that accepts and never answers: Start gives up with its
	// context.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	// (bun.NewDB itself asks the server its version, with no timeout: the
	// DB is opened while the server answers, and its connections go to
	// the silent peer from then on.)
	var silent atomic.Bool
	cfg, err := mysql.ParseDSN(dbtest.DSN())
	require.NoError(t, err)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if silent.Load() {
			addr = ln.Addr().String()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	sqldb := sql.OpenDB(connector)
	silentDB := bun.NewDB(sqldb, mysqldialect.New())
	t.Cleanup(func() { _ = silentDB.Close() })
	silent.Store(true)
	sqldb.SetMaxIdleConns(0) // no connection to the real server is kept
	err = startWithin(silentDB, 2*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	rep.BadInputs++

	// A missing table.
	dbtest.Exec(t, admin, "DROP TABLE IF EXISTS bq_rel_missing_table")
	err = startWithin(admin, 10*time.Second, bunqueue.NewQueue("bq_rel_missing",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *relMissingTable) error { return nil }, nil))
	require.ErrorContains(t, err, `queue "bq_rel_missing"`)
	require.ErrorContains(t, err, "table bq_rel_missing_table does not exist")
	rep.BadInputs++

	// A model without a primary key.
	c, err := bunqueue.NewClient(admin, &bunqueue.Config{Logger: testLogger(t)})
	require.NoError(t, err)
	err = c.Add(bunqueue.NewQueue("bq_rel_nopk", func(q *bun.SelectQuery) *bun.SelectQuery { return q },
		func(ctx context.Context, tx bun.Tx, it *relNoPK) error { return nil }, nil))
	require.ErrorContains(t, err, "has no primary key")
	rep.BadInputs++

	// A queue query with an SQL error, next to a good queue on the same
	// client: Start refuses it with the server's error, strict or not (it
	// is broken SQL, not a slow plan), and runs nothing; without it, the
	// good queue drains.
	broken := func() *bunqueue.Queue[relFaultItem] {
		return bunqueue.NewQueue("bq_rel_broken",
			func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("no_such_column = 1").Order("id") },
			func(ctx context.Context, tx bun.Tx, it *relFaultItem) error { return nil }, nil)
	}
	w := newRelWorkload(t, admin, "table")
	const goodItems = 50
	require.NoError(t, w.produce(0, goodItems))
	for _, strict := range []bool{false, true} {
		c := w.addClient(admin, 2, 1, bunqueue.Config{StrictQueryPlans: strict}, nil)
		require.NoError(t, c.Add(broken()))
		err = c.Start(t.Context())
		require.ErrorContains(t, err, "Unknown column 'no_such_column'")
		require.ErrorContains(t, err, `queue "bq_rel_broken"`)
	}
	require.Equal(t, goodItems, w.remaining(), "nothing ran")
	start(t, w.addClient(admin, 2, 1, bunqueue.Config{}, nil))
	require.True(t, relWaitFor(30*time.Second, func() bool { return w.remaining() == 0 }), "the good queue drained")
	w.stop()
	rep.BadInputs++

	rep.Duration = time.Since(began)
	rep.Enqueued, rep.Processed = goodItems, goodItems-w.remaining()
	rep.Lost = goodItems - rep.Processed
	rep.note("bad DSN, unknown database, nothing listening, a peer that never answers, missing table, model without a primary key, a queue query with an SQL error: each a clear error; Start bounded by its context")
	rep.log(t)
	require.Zero(t, rep.Lost)
}

type relUnreadableItem struct {
	bun.BaseModel `bun:"table:bq_rel_unreadable,alias:i"`
	ID            int64 `bun:",pk"`
	Status        string
	N             int // the column is a VARCHAR: a row with 'xyz' cannot be loaded
}

// An any-table row that cannot be loaded into the model (here a VARCHAR
// column holding "xyz" for an int field: a corrupt payload of an app's
// own table) fails the claim of every batch it is in. It should be
// reported as that row's failure, naming it, and cooled down like any
// failing row; its batch-mates should not fail with it.
func TestReliabilityUnreadableRow(t *testing.T) {
	relParallel(t)
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_rel_unreadable", "id BIGINT PRIMARY KEY, status VARCHAR(8) NOT NULL DEFAULT 'waiting', "+
		"n VARCHAR(16) NOT NULL DEFAULT '1', INDEX (status, id)")
	const rows, bad = 200, 3
	var vals []string
	for i := 1; i <= rows; i++ {
		n := "1"
		if i == bad {
			n = "xyz"
		}
		vals = append(vals, fmt.Sprintf("(%d, '%s')", i, n))
	}
	dbtest.Exec(t, db, "INSERT INTO bq_rel_unreadable (id, n) VALUES "+strings.Join(vals, ","))
	log, logged := leaseCaptureLogger(t)
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	require.NoError(t, c.Add(bunqueue.NewQueue("bq_rel_unreadable",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *relUnreadableItem) error {
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[relUnreadableItem]{Workers: 2, BatchSize: 5, Cooldown: time.Second})))
	began := time.Now()
	start(t, c)
	require.True(t, relWaitFor(20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_rel_unreadable WHERE status = 'done'") == rows-1
	}), "the other rows are done")
	took := time.Since(began)
	time.Sleep(3 * time.Second)
	out := logged()
	failures := strings.Count(out, "Scan error")
	t.Logf("the other rows took %s; the unreadable row failed %d times in %s", took, failures, time.Since(began))
	require.Contains(t, out, fmt.Sprintf("row id=%d", bad), "the failure names the row")
	require.LessOrEqual(t, failures, 4, "the row is cooled down (1 s, doubling), not retried at every read")
	require.Less(t, took, 5*time.Second, "the other rows are not held back")
}
