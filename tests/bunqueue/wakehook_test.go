package bunqueue_test

import (
	"context"
	"errors"
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

// The tests here poll every 10 s: a row processed well within a second
// was woken by the hook. They count the reads of the queue's feed (the
// plain SELECT tagged "bunqueue: read", which a wake-up triggers) with a
// query hook on the client's DB, to tell a wake-up that found nothing from
// no wake-up at all.

const hookPoll = 10 * time.Second

// readCounter counts the feed reads that mention all of its words.
type readCounter struct {
	words []string
	n     atomic.Int64
}

func (c *readCounter) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if !strings.Contains(e.Query, "bunqueue: read") {
		return ctx
	}
	for _, w := range c.words {
		if !strings.Contains(e.Query, w) {
			return ctx
		}
	}
	c.n.Add(1)
	return ctx
}

func (*readCounter) AfterQuery(context.Context, *bun.QueryEvent) {}

// settle waits until the feed made its first read and went to sleep, and
// returns the count.
func (c *readCounter) settle(t *testing.T) int64 {
	t.Helper()
	eventually(t, 5*time.Second, func() bool { return c.n.Load() >= 1 }, "first read")
	time.Sleep(200 * time.Millisecond)
	return c.n.Load()
}

// idle waits until no read was made for 150 ms.
func (c *readCounter) idle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for n := c.n.Load(); time.Now().Before(deadline); {
		time.Sleep(150 * time.Millisecond)
		if m := c.n.Load(); m != n {
			n = m
			continue
		}
		return
	}
	t.Fatal("the feed kept reading")
}

// quiet checks that no read is made for a while.
func (c *readCounter) quiet(t *testing.T, d time.Duration, msg string) {
	t.Helper()
	before := c.n.Load()
	time.Sleep(d)
	require.Equal(t, before, c.n.Load(), "no worker woke: %s", msg)
}

// woke waits for the count to pass n, which it must do within a second.
func (c *readCounter) woke(t *testing.T, n int64, msg string) {
	t.Helper()
	eventually(t, time.Second, func() bool { return c.n.Load() > n }, "a worker woke: %s", msg)
}

// doneTimes records when rows or jobs were processed.
type doneTimes struct {
	mu   sync.Mutex
	done map[int64]time.Time
}

func (d *doneTimes) mark(id int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done == nil {
		d.done = map[int64]time.Time{}
	}
	d.done[id] = time.Now()
}

func (d *doneTimes) get(id int64) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.done[id]
	return at, ok
}

// within asserts that id is processed less than a second after since.
func (d *doneTimes) within(t *testing.T, id int64, since time.Time, msg string) {
	t.Helper()
	var at time.Time
	require.Eventually(t, func() (ok bool) { at, ok = d.get(id); return ok }, 3*time.Second, 2*time.Millisecond,
		"%s: processed (the poll is %s)", msg, hookPoll)
	took := at.Sub(since)
	t.Logf("%s: processed %s after", msg, took)
	require.Less(t, took, time.Second, "%s: processed soon", msg)
}

func (d *doneTimes) notYet(t *testing.T, id int64, msg string) {
	t.Helper()
	_, ok := d.get(id)
	require.False(t, ok, "%s: not processed yet", msg)
}

// hookCols are the columns of the hook tests' tables.
type hookCols struct {
	ID     int64 `bun:",pk,autoincrement"`
	Status string
}

func (r *hookCols) rowID() int64 { return r.ID }

type (
	hookInsertRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_insert"`
		hookCols
	}
	hookTxRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_tx"`
		hookCols
	}
	hookRollbackRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_rollback"`
		hookCols
	}
	hookOtherCtxRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_otherctx"`
		hookCols
	}
	hookUpdateRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_update"`
		hookCols
	}
	hookQuietRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_quiet"`
		hookCols
	}
	hookSelfRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_self"`
		hookCols
	}
	hookParseRow struct {
		bun.BaseModel `bun:"table:bq_test_hook_parse"`
		hookCols
	}
)

// hookFixture is a started client with one queue over its own table
// (rows with status 'waiting'; the handler sets 'done'), polling every
// 10 s, and app, a DB hooked with the client's QueryHook.
type hookFixture struct {
	table  string
	schema string // the connection's database
	app    *bun.DB
	hook   bun.QueryHook // the client's, added to app
	reads  *readCounter
	done   doneTimes
	base   int64 // reads once the feed slept
}

// newHookFixture starts the fixture. With shared, the app writes through
// the client's own DB.
func newHookFixture[T any, P interface {
	*T
	rowID() int64
}](t *testing.T, table string, workers int, shared bool) *hookFixture {
	t.Helper()
	db := dbtest.Open(t, 0)
	createTable(t, db, table, "id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL, INDEX (status, id)")
	f := &hookFixture{table: table, reads: &readCounter{words: []string{table}}}
	schemaSQL := "SELECT DATABASE()"
	if isPG(db) {
		schemaSQL = "SELECT current_schema()"
	}
	require.NoError(t, db.NewRaw(schemaSQL).Scan(t.Context(), &f.schema))
	db.AddQueryHook(f.reads)
	q := bunqueue.NewQueue(table,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, r *T) error {
			if _, err := tx.NewUpdate().Model(r).Set("status = 'done'").WherePK().Exec(ctx); err != nil {
				return err
			}
			f.done.mark(P(r).rowID())
			return nil
		},
		&bunqueue.QueueConfig[T]{Workers: workers, BatchSize: 10})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: hookPoll, Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, c.Add(q))
	f.app = db
	if !shared {
		f.app = dbtest.Open(t, 0)
	}
	f.hook = c.QueryHook()
	f.app.AddQueryHook(f.hook) // before the DB is in use: bun's AddQueryHook is not synchronised
	start(t, c)
	f.base = f.reads.settle(t)
	return f
}

func TestHookWakesOnInsertOutsideTx(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookInsertRow](t, "bq_test_hook_insert", 2, false)
	for i := range 3 {
		row := &hookInsertRow{hookCols: hookCols{Status: "waiting"}}
		since := time.Now()
		_, err := f.app.NewInsert().Model(row).Exec(t.Context())
		require.NoError(t, err)
		f.done.within(t, row.ID, since, "insert "+itoa(i))
	}
}

func TestHookWakesOnCommitNotBefore(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookTxRow](t, "bq_test_hook_tx", 2, false)
	row := &hookTxRow{hookCols: hookCols{Status: "waiting"}}
	var committing time.Time
	err := f.app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		f.reads.quiet(t, 300*time.Millisecond, "the transaction is open")
		f.done.notYet(t, row.ID, "the transaction is open")
		committing = time.Now()
		return nil
	})
	require.NoError(t, err)
	f.done.within(t, row.ID, committing, "committed")
}

func TestHookRollbackWakesNothing(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookRollbackRow](t, "bq_test_hook_rollback", 2, false)
	errUndo := errors.New("undo")
	err := f.app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		for range 3 {
			if _, err := tx.NewInsert().Model(&hookRollbackRow{hookCols: hookCols{Status: "waiting"}}).Exec(ctx); err != nil {
				return err
			}
		}
		return errUndo
	})
	require.ErrorIs(t, err, errUndo)
	f.reads.quiet(t, 300*time.Millisecond, "rolled back")
	require.Equal(t, f.base, f.reads.n.Load())
	require.Zero(t, count(t, f.app, "SELECT COUNT(*) FROM bq_test_hook_rollback"))

	// The hook is not left confused: a later insert wakes at once.
	row := &hookRollbackRow{hookCols: hookCols{Status: "waiting"}}
	since := time.Now()
	_, err = f.app.NewInsert().Model(row).Exec(t.Context())
	require.NoError(t, err)
	f.done.within(t, row.ID, since, "insert after the rollback")
}

// A statement in a transaction run with a context other than the
// transaction's cannot be tied to it: it wakes at once (to no avail: the
// row is not committed) and again after the next commit.
func TestHookWakesOnNextCommitForAnotherContext(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookOtherCtxRow](t, "bq_test_hook_otherctx", 2, false)
	ctx := t.Context()
	tx, err := f.app.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	row := &hookOtherCtxRow{hookCols: hookCols{Status: "waiting"}}
	_, err = tx.NewInsert().Model(row).Exec(ctx) // ctx, not the transaction's
	require.NoError(t, err)
	f.reads.woke(t, f.base, "early wake")
	// On MySQL and MariaDB the feed reads at READ UNCOMMITTED: that read
	// may see the row, hand it out, and, when the claim finds it locked,
	// read once more. Then nothing until the commit.
	time.Sleep(150 * time.Millisecond)
	require.LessOrEqual(t, f.reads.n.Load(), f.base+2, "reads after the early wake")
	f.reads.quiet(t, 300*time.Millisecond, "after the early wake")
	f.done.notYet(t, row.ID, "the transaction is open")
	committing := time.Now()
	require.NoError(t, tx.Commit())
	f.done.within(t, row.ID, committing, "committed")
}

func TestHookWakesOnUpdateBackToWaiting(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookUpdateRow](t, "bq_test_hook_update", 2, false)
	ctx := t.Context()
	// Rows that left the queue, written without the hook.
	dbtest.Exec(t, dbtest.Open(t, 0), "INSERT INTO bq_test_hook_update (id, status) VALUES (1, 'done'), (2, 'done'), (3, 'done')")
	f.reads.quiet(t, 100*time.Millisecond, "an unhooked insert")

	since := time.Now()
	_, err := f.app.NewUpdate().Model(&hookUpdateRow{hookCols: hookCols{ID: 1}}).Set("status = ?", "waiting").WherePK().Exec(ctx)
	require.NoError(t, err)
	f.done.within(t, 1, since, "builder UPDATE")

	since = time.Now()
	raw := "/* back */ UPDATE LOW_PRIORITY `" + f.schema + "`.`bq_test_hook_update` AS u SET u.status = 'waiting' WHERE u.id = 2"
	if isPG(f.app) {
		raw = `/* back */ UPDATE "` + f.schema + `"."bq_test_hook_update" AS u SET status = 'waiting' WHERE u.id = 2`
	}
	_, err = f.app.ExecContext(ctx, raw)
	require.NoError(t, err)
	f.done.within(t, 2, since, "raw UPDATE")

	since = time.Now()
	upsert := "INSERT INTO bq_test_hook_update (id, status) VALUES (3, 'waiting') ON DUPLICATE KEY UPDATE status = VALUES(status)"
	if isPG(f.app) {
		upsert = "INSERT INTO bq_test_hook_update (id, status) VALUES (3, 'waiting') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status"
	}
	_, err = f.app.NewRaw(upsert).Exec(ctx)
	require.NoError(t, err)
	f.done.within(t, 3, since, "INSERT … ON DUPLICATE KEY UPDATE")

	// An UPDATE that changes nothing wakes nothing. (Not on PostgreSQL:
	// its UPDATE counts the rows it matched, changed or not, so the hook
	// cannot tell.)
	if isPG(f.app) {
		return
	}
	f.reads.idle(t)
	_, err = f.app.NewRaw("UPDATE bq_test_hook_update SET status = 'done' WHERE id = 3").Exec(ctx)
	require.NoError(t, err)
	f.reads.quiet(t, 300*time.Millisecond, "an UPDATE that changed no row")
}

func TestHookIgnoresOtherStatements(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookQuietRow](t, "bq_test_hook_quiet", 2, false)
	ctx := t.Context()
	createTable(t, f.app, "bq_test_hook_quiet2", "id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL")
	f.reads.quiet(t, 100*time.Millisecond, "CREATE TABLE")
	base := f.reads.n.Load()

	_, err := f.app.NewInsert().Model(&struct {
		bun.BaseModel `bun:"table:bq_test_hook_quiet2"`
		hookCols
	}{hookCols: hookCols{Status: "waiting"}}).Exec(ctx)
	require.NoError(t, err)
	for _, q := range []string{
		"INSERT INTO bq_test_hook_quiet2 (status) VALUES ('waiting')",
		"INSERT INTO bq_test_hook_quiet2 (status) SELECT status FROM bq_test_hook_quiet",
		"UPDATE bq_test_hook_quiet2 SET status = COALESCE((SELECT 'x' FROM bq_test_hook_quiet LIMIT 1), 'y')",
		"SELECT * FROM bq_test_hook_quiet",
		"/* INSERT INTO bq_test_hook_quiet */ SELECT 'UPDATE bq_test_hook_quiet SET'",
		"DELETE FROM bq_test_hook_quiet",
	} {
		_, err := f.app.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, f.app.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE bq_test_hook_quiet2 SET status = 'other'")
		return err
	}))
	f.reads.quiet(t, 300*time.Millisecond, "statements on other tables, reads, deletes")
	require.Equal(t, base, f.reads.n.Load())
}

// The workers' own writes (the handler taking the row out, through the
// hooked DB) do not wake their own queue: the feed reads again once its
// workers took what it found anyway.
func TestHookWorkerWritesDoNotWakeTheirQueue(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookSelfRow](t, "bq_test_hook_self", 2, true)
	row := &hookSelfRow{hookCols: hookCols{Status: "waiting"}}
	since := time.Now()
	_, err := f.app.NewInsert().Model(row).Exec(t.Context())
	require.NoError(t, err)
	f.done.within(t, row.ID, since, "insert")
	eventually(t, time.Second, func() bool { return f.reads.n.Load() >= f.base+2 }, "the read again once the row was taken")
	f.reads.quiet(t, 300*time.Millisecond, "after the batch")
	require.Equal(t, f.base+2, f.reads.n.Load(), "one read found the row, one found nothing; the feed slept on")
}

// The hook reads table names from the SQL text, whatever the shape of the
// statement. Events are handed to the hook as bun would.
func TestHookParsesStatements(t *testing.T) {
	t.Parallel()
	f := newHookFixture[hookParseRow](t, "bq_test_hook_parse", 1, false)
	run := func(e *bun.QueryEvent) {
		ctx := f.hook.BeforeQuery(context.Background(), e)
		f.hook.AfterQuery(ctx, e)
	}
	tbl, db := "bq_test_hook_parse", f.schema
	for _, q := range []string{
		"INSERT INTO " + tbl + " (status) VALUES ('waiting')",
		"insert ignore into `" + tbl + "` values (1, 'waiting')",
		"INSERT " + tbl + " VALUES (1, 'waiting')",
		" /* a */ -- b\n# c\nINSERT /*+ SET_VAR(sort_buffer_size = 16M) */ LOW_PRIORITY IGNORE INTO `" + db + "`.`" + tbl + "` SET status = 'waiting'",
		"REPLACE INTO " + db + "." + tbl + " VALUES (1, 'waiting')",
		"INSERT INTO " + tbl + " (id, status) VALUES (1, 'waiting') ON DUPLICATE KEY UPDATE status = 'waiting'",
		"INSERT INTO " + strings.ToUpper(tbl) + " VALUES (1, 'waiting')",
		`INSERT INTO "` + tbl + `" VALUES (1, 'waiting')`,
		"UPDATE " + tbl + " SET status = 'waiting'",
		"update low_priority ignore `" + tbl + "` as t set t.status = 'waiting'",
		"UPDATE other o JOIN `" + tbl + "` t ON t.id = o.id AND o.x IN (1, 2) SET t.status = 'waiting'",
		"UPDATE other AS o, `" + db + "` . " + tbl + " SET status = 'waiting'",
		"WITH x (id) AS (SELECT 1), y AS (SELECT 2) UPDATE " + tbl + " JOIN x USING (id) SET status = 'waiting'",
	} {
		n := f.reads.n.Load()
		run(&bun.QueryEvent{Query: q})
		f.reads.woke(t, n, q)
		eventually(t, time.Second, func() bool { return f.reads.n.Load() == n+1 }, q)
	}
	base := f.reads.n.Load()
	for _, q := range []string{
		"SELECT * FROM " + tbl,
		"DELETE FROM " + tbl,
		"INSERT INTO " + tbl + "_x VALUES (1)",
		"INSERT INTO other SELECT * FROM " + tbl,
		"INSERT INTO other_schema." + tbl + "x VALUES (1)",
		"UPDATE other SET a = (SELECT 1 FROM " + tbl + ")",
		"UPDATE other SET note = 'JOIN " + tbl + "'",
		"UPDATE `" + tbl + "x` SET status = 'waiting'",
		"/* INSERT INTO " + tbl + " */ SELECT 1",
		"-- INSERT INTO " + tbl + "\nSELECT 1",
		"SELECT 'INSERT INTO " + tbl + "'",
		"WITH " + tbl + " AS (SELECT 1) SELECT * FROM " + tbl,
		"INSERT INTO",
		"UPDATE",
		"",
	} {
		run(&bun.QueryEvent{Query: q})
	}
	run(&bun.QueryEvent{Query: "INSERT INTO " + tbl + " VALUES (1, 'waiting')", Err: errors.New("failed")})
	f.reads.quiet(t, 300*time.Millisecond, "statements that do not write the table")
	require.Equal(t, base, f.reads.n.Load())
}

type hookPing struct {
	N int64 `json:"n"`
}

func (hookPing) Kind() string { return "hook_ping" }

func TestHookWakesJobsWorkerOnEnqueue(t *testing.T) {
	t.Parallel()
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, 0)
			queue, other := jobQueue(t), jobQueue(t)
			reads := &readCounter{words: []string{"'" + queue + "'"}}
			db.AddQueryHook(reads)
			c, err := bunqueue.NewClient(db, &bunqueue.Config{
				PollInterval: hookPoll, Logger: testLogger(t),
				JobQueues: map[string]bunqueue.JobQueueConfig{
					queue: {Workers: 2, Mode: mode, Lease: 5 * time.Second},
					other: {Workers: 1, Mode: mode, Lease: 5 * time.Second},
				},
			})
			require.NoError(t, err)
			var done doneTimes
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[hookPing](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[hookPing]) error {
				done.mark(job.Args.N)
				return nil
			})))
			// One DB for the app and the client, as usual: the workers'
			// own statements pass the hook too.
			app := db
			app.AddQueryHook(c.QueryHook())
			start(t, c)
			reads.settle(t)

			since := time.Now()
			_, err = c.Enqueue(t.Context(), app, hookPing{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			done.within(t, 1, since, "Enqueue through the hooked DB")

			reads.idle(t)
			var committing time.Time
			require.NoError(t, app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := c.Enqueue(ctx, tx, hookPing{N: 2}, &bunqueue.EnqueueOpts{Queue: queue}); err != nil {
					return err
				}
				reads.quiet(t, 300*time.Millisecond, "the transaction is open")
				committing = time.Now()
				return nil
			}))
			done.within(t, 2, committing, "Enqueue in a committed transaction")

			// A job for the other queue does not wake this one.
			reads.idle(t)
			before := reads.n.Load()
			since = time.Now()
			_, err = c.Enqueue(t.Context(), app, hookPing{N: 3}, &bunqueue.EnqueueOpts{Queue: other})
			require.NoError(t, err)
			done.within(t, 3, since, "Enqueue into the other queue")
			time.Sleep(300 * time.Millisecond)
			require.Equal(t, before, reads.n.Load(), "a job of another queue, and its processing, woke no worker of this one")
		})
	}
}
