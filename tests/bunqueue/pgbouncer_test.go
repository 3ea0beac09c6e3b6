package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/codes"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of this file run bunqueue through a real PgBouncer
// (dbtest.PgBouncerDSN; scripts/pgbouncer.sh starts one) in front of
// PostgreSQL, whatever server BUNQUEUE_TEST_SERVER chooses. In transaction
// mode, with a pool of a few server sessions, consecutive transactions of
// one client connection run on different server sessions, shared with
// every other client of the pooler.

// logTally is a slog.Handler that passes records on to next and keeps
// them, for tests that count warnings.
type logTally struct {
	next slog.Handler
	mu   *sync.Mutex
	recs *[]slog.Record
}

// newLogTally returns a logger that writes to the test's log and keeps
// what it logs in the returned tally.
func newLogTally(t *testing.T) (*slog.Logger, *logTally) {
	h := &logTally{next: testLogger(t).Handler(), mu: &sync.Mutex{}, recs: &[]slog.Record{}}
	return slog.New(h), h
}

func (h *logTally) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logTally) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r.Clone())
	h.mu.Unlock()
	return h.next.Handle(ctx, r)
}

func (h *logTally) WithAttrs(as []slog.Attr) slog.Handler {
	return &logTally{next: h.next.WithAttrs(as), mu: h.mu, recs: h.recs}
}

func (h *logTally) WithGroup(name string) slog.Handler {
	return &logTally{next: h.next.WithGroup(name), mu: h.mu, recs: h.recs}
}

// count returns how many records of level mention substr, in their
// message or an attribute.
func (h *logTally) count(level slog.Level, substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range *h.recs {
		text := r.Message
		r.Attrs(func(a slog.Attr) bool { text += " " + a.Value.String(); return true })
		if r.Level == level && strings.Contains(text, substr) {
			n++
		}
	}
	return n
}

// bystander is another application's traffic through the same pooler: a
// loop of short transactions that read their isolation level and sleep a
// moment in SQL, so that some of them run on a server session while a
// worker's handler there times out, or right after.
type bystander struct {
	cancel context.CancelFunc
	done   chan struct{}
	want   string // the isolation level its transactions must run at

	txs    atomic.Int64
	mu     sync.Mutex
	errs   []error
	levels map[string]int // levels other than want, by level
}

// startBystander runs a bystander on db until stop is called, or the test
// ends.
func startBystander(t *testing.T, db *bun.DB, want string) *bystander {
	ctx, cancel := context.WithCancel(context.Background())
	b := &bystander{cancel: cancel, done: make(chan struct{}), want: want, levels: map[string]int{}}
	go func() {
		defer close(b.done)
		for ctx.Err() == nil {
			b.one(ctx, db)
		}
	}()
	t.Cleanup(b.stop)
	return b
}

// one runs one transaction of the bystander's.
func (b *bystander) one(ctx context.Context, db *bun.DB) {
	var level, timeout string
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT current_setting('transaction_isolation'), current_setting('lock_timeout')").Scan(&level, &timeout); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "SELECT pg_sleep(0.01)")
		return err
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		b.errs = append(b.errs, err)
		return
	case level != b.want:
		b.levels[level]++
	case timeout != "0":
		b.levels["lock_timeout "+timeout]++
	}
	b.txs.Add(1)
}

// stop stops the bystander and waits for its last transaction.
func (b *bystander) stop() {
	b.cancel()
	<-b.done
}

// check requires that no transaction of the bystander failed (none was
// ended by bunqueue) or ran with another application's settings.
func (b *bystander) check(t *testing.T) {
	t.Helper()
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	t.Logf("bystander: %d transactions, %d failed, %v at other settings than %s", b.txs.Load(), len(b.errs), b.levels, b.want)
	require.Empty(t, b.errs, "the bystander's transactions failed (ended by bunqueue?)")
	require.Empty(t, b.levels, "the bystander's transactions ran with bunqueue's settings")
	require.Positive(t, b.txs.Load(), "the bystander ran")
}

type pgbItem struct {
	bun.BaseModel `bun:"table:bq_test_pgb"`
	ID            int64 `bun:",pk"`
	Status        string
	Attempts      int
}

// pgbHangMarker tags the statements of the handlers that hang.
const pgbHangMarker = "bq_test_pgb_hang"

// pgbWork is the handler's side of the pooler tests: every run is
// counted, and checked for what it must see.
type pgbWork struct {
	hangEvery int64 // ids that are a multiple of it hang in SQL
	runs      sync.Map
	held      holders
	total     atomic.Int64
	mu        sync.Mutex
	levels    map[string]int // isolation levels of the handlers' transactions
	errs      []error        // errors of statements that should not fail
}

// handle is the queue's handler: it checks its isolation level, writes
// its effect and takes its row out of the queue; the rows that hang sleep
// in SQL past the queue's Timeout.
func (w *pgbWork) handle(ctx context.Context, tx bun.Tx, it *pgbItem) error {
	w.total.Add(1)
	n, _ := w.runs.LoadOrStore(it.ID, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	defer w.held.hold(it.ID)()
	var level string
	if err := tx.QueryRowContext(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level); err != nil {
		return err
	}
	w.mu.Lock()
	w.levels[level]++
	w.mu.Unlock()
	if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_pgb_effect (item_id) VALUES (?)", it.ID); err != nil {
		w.failed(err)
		return err
	}
	if it.ID%w.hangEvery == 0 {
		_, err := tx.ExecContext(ctx, "SELECT pg_sleep(30) /* "+pgbHangMarker+" */")
		return err
	}
	_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
	return err
}

func (w *pgbWork) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

// onError records a failure on the row, in the failure's own transaction.
func (w *pgbWork) onError(ctx context.Context, tx bun.Tx, it *pgbItem, cause error) error {
	if !errors.Is(cause, context.DeadlineExceeded) {
		w.failed(fmt.Errorf("row %d: %w", it.ID, cause))
	}
	_, err := tx.NewUpdate().Model(it).Set("status = 'failed'").Set("attempts = attempts + 1").WherePK().Exec(ctx)
	return err
}

// reruns returns how many handler runs were a second (or later) run of
// their row, for the rows that do not hang, and how many times a row that
// hangs ran. (One that hangs may run again in another client between the
// end of its session and the record of its failure.)
func (w *pgbWork) reruns() (extra, hangs int) {
	w.runs.Range(func(id, n any) bool {
		runs := int(n.(*atomic.Int64).Load())
		if id.(int64)%w.hangEvery == 0 {
			hangs += runs
		} else {
			extra += runs - 1
		}
		return true
	})
	return extra, hangs
}

// pgbTables creates the queue's table with items rows, and the table of
// its effects, on db.
func pgbTables(t *testing.T, db *bun.DB, items int) {
	t.Helper()
	createTable(t, db, "bq_test_pgb", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', attempts INT NOT NULL DEFAULT 0, INDEX (status, id)")
	createTable(t, db, "bq_test_pgb_effect", "item_id BIGINT NOT NULL, UNIQUE KEY (item_id)")
	insertIDs(t, db, "bq_test_pgb", items)
}

// statusTable creates table, with a status column and rows 1 … items.
func statusTable(t *testing.T, db *bun.DB, table string, items int) {
	t.Helper()
	createTable(t, db, table, "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	insertIDs(t, db, table, items)
}

// pgbQueue returns a queue over bq_test_pgb that w handles.
func pgbQueue(w *pgbWork, workers, batch int, timeout time.Duration) *bunqueue.Queue[pgbItem] {
	return bunqueue.NewQueue("pgb", stopQuery, w.handle, &bunqueue.QueueConfig[pgbItem]{Workers: workers, BatchSize: batch, Timeout: timeout, OnError: w.onError})
}

// hanging counts the hung handlers' statements still running in database.
func hanging(t *testing.T, admin *bun.DB, database string) int {
	return count(t, admin, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = ? AND query LIKE ? AND query NOT LIKE '%pg_stat_activity%'",
		database, "%"+pgbHangMarker+"%")
}

// checkOutcome requires that every row of bq_test_pgb left the queue
// once: the rows that hang failed once, by their Timeout, and the others
// were done once, with one effect each, and no two handlers ran on one
// row at once.
func (w *pgbWork) checkOutcome(t *testing.T, admin *bun.DB, items int) {
	t.Helper()
	hung := items / int(w.hangEvery)
	require.Equal(t, items-hung, count(t, admin, "SELECT COUNT(*) FROM bq_test_pgb WHERE status = 'done'"))
	require.Equal(t, hung, count(t, admin, "SELECT COUNT(*) FROM bq_test_pgb WHERE status = 'failed' AND attempts = 1"), "the rows that hang failed once")
	require.Equal(t, items-hung, count(t, admin, "SELECT COUNT(*) FROM bq_test_pgb_effect"), "one effect per row done, none of the failed ones")
	require.Zero(t, w.held.overlaps.Load(), "two handlers ran on one row at once")
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.errs, "statements failed that should not have (a duplicate effect, or an ended session)")
	require.Equal(t, map[string]int{"read committed": int(w.total.Load())}, w.levels, "every handler ran at READ COMMITTED")
}

// Through PgBouncer in transaction mode, in a database whose default is
// REPEATABLE READ: three clients (pools of their own), four workers each,
// with prepared statements on by default, and a Timeout that fires on the
// handlers that hang in SQL, next to a bystander that runs transactions of
// its own through the same pooler. Every row leaves the queue once, every
// handler runs at READ COMMITTED, a handler that hangs has its own server
// session ended and no other, the bystander's transactions are never ended
// nor run at READ COMMITTED, and each client turns its prepared statements
// off at Start, with one warning.
func TestPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	const (
		items    = 240
		clients  = 3
		workers  = 4
		maxBatch = 4
	)
	name := dbtest.ScratchPGDatabase(t, "bq_pgb_tx", map[string]string{"default_transaction_isolation": "repeatable read"})
	dsn := dbtest.PgBouncerDSN(t, name, false)
	admin := dbtest.OpenPGDSN(t, dbtest.PGDatabaseDSN(t, name), 2)
	pgbTables(t, admin, items)
	by := startBystander(t, dbtest.OpenPGDSN(t, dsn, 2), "repeatable read")

	w := &pgbWork{hangEvery: 40, levels: map[string]int{}}
	logs := make([]*logTally, clients)
	for i := range clients {
		var log *slog.Logger
		log, logs[i] = newLogTally(t)
		c, err := bunqueue.NewClient(dbtest.OpenPGDSN(t, dsn, workers+4), &bunqueue.Config{PollInterval: 50 * time.Millisecond, Logger: log})
		require.NoError(t, err)
		require.NoError(t, c.Add(pgbQueue(w, workers, []int{1, 1, maxBatch}[i], 500*time.Millisecond)))
		start(t, c)
	}
	eventually(t, 90*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_test_pgb WHERE status = 'waiting'") == 0
	}, "every row left the queue")
	by.check(t)
	eventually(t, 10*time.Second, func() bool { return hanging(t, admin, name) == 0 }, "the hung statements' sessions were ended")
	w.checkOutcome(t, admin, items)
	// A hang's Timeout ends its session, and with it the transaction of
	// its batch: the other items of that batch (at most maxBatch-1) run
	// again. Nothing else may make a row run twice.
	extra, hangs := w.reruns()
	t.Logf("%d handler runs for %d rows; %d runs again of rows that do not hang, %d runs of rows that hang", w.total.Load(), items, extra, hangs)
	require.LessOrEqual(t, extra, hangs*(maxBatch-1), "handlers ran again beyond the batches their hangs lost")
	for i, log := range logs {
		require.Equal(t, 1, log.count(slog.LevelWarn, "prepared statements"), "client %d warns once that its prepared statements are off", i)
		require.Zero(t, log.count(slog.LevelError, "prepared statement"), "client %d: a batch failed on a prepared statement", i)
	}
}

type pgbSessionItem struct {
	bun.BaseModel `bun:"table:bq_test_pgb_session"`
	ID            int64 `bun:",pk"`
	Status        string
}

// Through PgBouncer's session mode (one server session per client
// connection) prepared statements stay on, without a warning, and every
// row is done once.
func TestPgBouncerSessionMode(t *testing.T) {
	t.Parallel()
	const items, workers = 120, 3
	dsn := dbtest.PgBouncerDSN(t, "test_session", false)
	admin := dbtest.OpenPG(t, 2)
	statusTable(t, admin, "bq_test_pgb_session", items)
	var runs atomic.Int64
	q := bunqueue.NewQueue("pgb-session", stopQuery, func(ctx context.Context, tx bun.Tx, it *pgbSessionItem) error {
		runs.Add(1)
		return markDone(ctx, tx, it)
	}, &bunqueue.QueueConfig[pgbSessionItem]{Workers: workers, BatchSize: 1, Timeout: 5 * time.Second})
	log, tally := newLogTally(t)
	tel := newTelBundle(t)
	start(t, tel.client(t, dbtest.OpenPGDSN(t, dsn, workers+4), bunqueue.Config{Logger: log}, q))
	eventually(t, 60*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_test_pgb_session WHERE status = 'done'") == items
	}, "every row done")
	require.Equal(t, int64(items), runs.Load(), "one run per row")
	require.Zero(t, tally.count(slog.LevelWarn, "prepared statements"), "prepared statements were turned off in session mode")
	claims, _ := preparedSpans(tel.spans, "bq_test_pgb_session")
	require.NotEmpty(t, claims, "no claim ran prepared in session mode")
}

// Two clients (pools of their own) migrate a new database at once through
// PgBouncer in transaction mode, then again: each version is applied once,
// no lock is left behind on a server session, and no session's
// lock_timeout is changed for the next client that gets it.
func TestPgBouncerMigrate(t *testing.T) {
	t.Parallel()
	const procs = 2
	name := dbtest.ScratchPGDatabase(t, "bq_pgb_mig", nil)
	dsn := dbtest.PgBouncerDSN(t, name, false)
	admin := dbtest.OpenPGDSN(t, dbtest.PGDatabaseDSN(t, name), 2)
	by := startBystander(t, dbtest.OpenPGDSN(t, dsn, 2), "read committed")
	pools := make([]*bun.DB, procs)
	for i := range pools {
		pools[i] = dbtest.OpenPGDSN(t, dsn, 2)
	}
	for round := range 2 {
		errs := make([]error, procs)
		var wg sync.WaitGroup
		for i, db := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				errs[i] = bunqueue.Migrate(ctx, db)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, client %d", round, i)
		}
		require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = ?", name),
			"round %d: an advisory lock is left on a server session", round)
	}
	require.Equal(t, allVersions(t, admin), appliedVersions(t, admin), "each version once")
	by.check(t)
}

// A plain pgx DSN through PgBouncer in transaction mode: pgx's own
// statement cache cannot work there, and Start says so and how to fix it,
// with bunqueue's own prepared statements on or off.
func TestPgBouncerPlainDSN(t *testing.T) {
	t.Parallel()
	name := dbtest.ScratchPGDatabase(t, "bq_pgb_plain", nil)
	dsn := dbtest.PgBouncerDSN(t, name, true)
	pgbTables(t, dbtest.OpenPGDSN(t, dbtest.PGDatabaseDSN(t, name), 2), 10)
	for _, off := range []bool{false, true} {
		w := &pgbWork{hangEvery: 1000, levels: map[string]int{}}
		c, err := bunqueue.NewClient(dbtest.OpenPGDSN(t, dsn, 8), &bunqueue.Config{NoPreparedStatements: off, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, c.Add(pgbQueue(w, 2, 1, 0)))
		err = c.Start(t.Context())
		if err == nil {
			require.NoError(t, c.Stop(t.Context()))
		}
		require.ErrorContains(t, err, "default_query_exec_mode=exec", "NoPreparedStatements %v: Start names the fix", off)
		require.ErrorContains(t, err, "statement cache", "NoPreparedStatements %v: Start names the cause", off)
	}
}

type pgbLostItem struct {
	bun.BaseModel `bun:"table:bq_test_pgb_lost"`
	ID            int64 `bun:",pk"`
	Status        string
}

// A prepared statement the server session does not have, as behind a
// pooler whose detection at Start missed it (here a handler drops every
// statement of its session): the client's prepared statements go off for
// good, with one warning, and the transaction that failed runs again at
// once, in text; no batch fails, and only that one row runs twice.
func TestPreparedStatementLostTurnsThemOff(t *testing.T) {
	t.Parallel()
	const items, dropAt = 200, 150
	db := dbtest.OpenPG(t, 0)
	statusTable(t, db, "bq_test_pgb_lost", items)
	createTable(t, db, "bq_test_pgb_lost_effect", "item_id BIGINT NOT NULL, UNIQUE KEY (item_id)")
	var runs atomic.Int64
	var dropped atomic.Bool
	var held holders
	q := bunqueue.NewQueue("pgb-lost", stopQuery, func(ctx context.Context, tx bun.Tx, it *pgbLostItem) error {
		runs.Add(1)
		defer held.hold(it.ID)()
		if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_pgb_lost_effect (item_id) VALUES (?)", it.ID); err != nil {
			return err
		}
		if it.ID == dropAt && dropped.CompareAndSwap(false, true) {
			if _, err := tx.ExecContext(ctx, "DEALLOCATE ALL"); err != nil {
				return err
			}
		}
		return markDone(ctx, tx, it)
	}, &bunqueue.QueueConfig[pgbLostItem]{Workers: 2, BatchSize: 1})
	log, tally := newLogTally(t)
	tel := newTelBundle(t)
	start(t, tel.client(t, db, bunqueue.Config{Logger: log}, q))
	waitDrained(t, db, "bq_test_pgb_lost", 60*time.Second)

	require.True(t, dropped.Load())
	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_pgb_lost_effect"), "one effect per row")
	require.Zero(t, held.overlaps.Load())
	require.Equal(t, int64(items+1), runs.Load(), "only the row whose re-check failed ran again")
	require.Equal(t, 1, tally.count(slog.LevelWarn, "prepared statements are off"), "one warning")
	require.Zero(t, tally.count(slog.LevelError, "batch failed"))
	claims, rechecks := preparedSpans(tel.spans, "bq_test_pgb_lost")
	require.NotEmpty(t, claims, "claims ran prepared before the loss")
	failed := 0
	for _, s := range append(claims, rechecks...) {
		if s.Status.Code == codes.Error {
			failed++
		}
	}
	require.Equal(t, 1, failed, "one prepared statement failed, the lost one")
}

type pgbTrackItem struct {
	bun.BaseModel `bun:"table:bq_test_pgb_track"`
	ID            int64 `bun:",pk"`
	Status        string
}

// Where pg_stat_activity cannot show a session's transaction
// (track_activities off), the session of a handler that times out could
// never be ended safely: Start refuses a queue with a Timeout, and takes
// one without.
func TestTimeoutRefusedWithoutTrackActivities(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dbtest.PGDSN())
	require.NoError(t, err)
	params := u.Query()
	params.Set("track_activities", "off")
	u.RawQuery = params.Encode()
	db := dbtest.OpenPGDSN(t, u.String(), 0)
	statusTable(t, db, "bq_test_pgb_track", 0)
	for _, timeout := range []time.Duration{time.Second, 0} {
		q := bunqueue.NewQueue("pgb-track", stopQuery, markDone[pgbTrackItem], &bunqueue.QueueConfig[pgbTrackItem]{Timeout: timeout})
		c := newClient(t, db, q)
		err := c.Start(t.Context())
		if timeout == 0 {
			require.NoError(t, err, "no Timeout, nothing to end")
			require.NoError(t, c.Stop(t.Context()))
			continue
		}
		require.ErrorContains(t, err, `queue "pgb-track" has a Timeout`)
		require.ErrorContains(t, err, "track_activities is off")
	}
}
