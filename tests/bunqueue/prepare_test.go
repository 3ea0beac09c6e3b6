package bunqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// preparedSpans returns the CLIENT spans of the statements bunqueue ran
// prepared on table: the claims (they lock) and the re-checks.
func preparedSpans(exp *tracetest.InMemoryExporter, table string) (claims, rechecks []tracetest.SpanStub) {
	for _, s := range exp.GetSpans() {
		if s.SpanKind != trace.SpanKindClient || s.Name != "SELECT "+table {
			continue
		}
		text, _ := spanAttr(s, "db.query.text")
		if strings.Contains(fmt.Sprint(text), "SKIP LOCKED") {
			claims = append(claims, s)
		} else {
			rechecks = append(rechecks, s)
		}
	}
	return claims, rechecks
}

// waitDrained waits until table has no waiting rows left.
func waitDrained(t *testing.T, db *bun.DB, table string, wait time.Duration) {
	t.Helper()
	eventually(t, wait, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE status = 'waiting'") == 0
	}, "%s drains", table)
}

type preparedItem struct {
	bun.BaseModel `bun:"table:bq_test_prepared"`
	ID            int64 `bun:",pk"`
	Status        string
}

// TestPreparedClaimsAcrossClients runs three clients with their own pools,
// four workers each, one row per transaction, so that claims and
// re-checks run as prepared statements once their text has recurred. A
// handler writes an effect (UNIQUE on the item) and takes its row out of
// the queue. Nothing may be lost, nothing done twice, no row held by two
// handlers at once, and the statements must have run prepared, each with
// its own span in the process span's trace, none failed.
func TestPreparedClaimsAcrossClients(t *testing.T) {
	const (
		items   = 900
		clients = 3
		workers = 4
	)
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_prepared", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	createTable(t, db, "bq_test_prepared_effect", "item_id BIGINT NOT NULL, UNIQUE KEY (item_id)")
	insertIDs(t, db, "bq_test_prepared", items)

	var (
		calls, handlerErrs atomic.Int64
		held               holders
	)
	query := func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}
	tels := make([]*telBundle, clients)
	var cs []*bunqueue.Client
	for i := range clients {
		tels[i] = newTelBundle(t)
		q := bunqueue.NewQueue("prepared", query, func(ctx context.Context, tx bun.Tx, it *preparedItem) error {
			calls.Add(1)
			defer held.hold(it.ID)()
			if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_prepared_effect (item_id) VALUES (?)", it.ID); err != nil {
				handlerErrs.Add(1)
				return err
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[preparedItem]{Workers: workers, BatchSize: 1})
		cs = append(cs, tels[i].client(t, dbtest.Open(t, workers+4), bunqueue.Config{}, q))
	}
	for _, c := range cs {
		start(t, c)
	}
	waitDrained(t, db, "bq_test_prepared", 60*time.Second)

	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_prepared_effect"), "one effect per item")
	require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_prepared WHERE status = 'done'"))
	require.Zero(t, held.overlaps.Load(), "two handlers held one item at once")
	require.Zero(t, handlerErrs.Load(), "a handler failed (a duplicate effect would fail here)")
	require.Equal(t, int64(items), calls.Load())

	total := 0
	for i, tel := range tels {
		claims, rechecks := preparedSpans(tel.spans, "bq_test_prepared")
		t.Logf("client %d: %d prepared claims, %d prepared re-checks", i, len(claims), len(rechecks))
		total += len(claims)
		require.NotEmpty(t, rechecks, "client %d ran no prepared re-check", i)
		mark := "?"
		if isPG(db) {
			mark = "$1"
		}
		for _, s := range append(claims, rechecks...) {
			require.Equal(t, codes.Unset, s.Status.Code, "a prepared statement failed: %s", s.Status.Description)
			text, _ := spanAttr(s, "db.query.text")
			require.Contains(t, fmt.Sprint(text), "IN ("+mark+")", "the key is an argument")
			require.True(t, s.Parent.IsValid(), "the statement's span is in the process span's trace")
		}
	}
	// Each worker's first claims of a text run before the statement is
	// prepared; most of the 900 must have run prepared.
	require.Greater(t, total, items/2, "most claims ran prepared")
}

type preparedPairItem struct {
	bun.BaseModel `bun:"table:bq_test_prepared_pair"`
	A             int64  `bun:",pk"`
	B             string `bun:",pk"`
	Status        string
}

// A composite key is two arguments of the prepared claim.
func TestPreparedClaimsCompositeKey(t *testing.T) {
	t.Parallel()
	const items = 200
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_prepared_pair", "a BIGINT NOT NULL, b VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'waiting', PRIMARY KEY (a, b), INDEX (status, a, b)")
	var vals []string
	for i := range items {
		vals = append(vals, fmt.Sprintf("(%d, 'k%d')", i/2, i))
	}
	dbtest.Exec(t, db, "INSERT INTO bq_test_prepared_pair (a, b) VALUES "+strings.Join(vals, ", "))
	var done atomic.Int64
	q := bunqueue.NewQueue("prepared-pair", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("a", "b")
	}, func(ctx context.Context, tx bun.Tx, it *preparedPairItem) error {
		res, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			done.Add(1)
		}
		return nil
	}, &bunqueue.QueueConfig[preparedPairItem]{Workers: 2, BatchSize: 1})
	tel := newTelBundle(t)
	start(t, tel.client(t, db, bunqueue.Config{}, q))
	waitDrained(t, db, "bq_test_prepared_pair", 30*time.Second)
	require.Equal(t, int64(items), done.Load())
	claims, rechecks := preparedSpans(tel.spans, "bq_test_prepared_pair")
	require.NotEmpty(t, claims)
	require.NotEmpty(t, rechecks)
	text, _ := spanAttr(claims[0], "db.query.text")
	want := "IN ((?, ?))"
	if isPG(db) {
		want = "IN (($1, $2))"
	}
	require.Contains(t, fmt.Sprint(text), want)
}

type preparedNowItem struct {
	bun.BaseModel `bun:"table:bq_test_prepared_now"`
	ID            int64 `bun:",pk"`
	Status        string
	RunAt         time.Time
}

// A query whose text changes with every call (it embeds the client's
// time) is never prepared, and its rows are processed all the same; with
// Config.NoPreparedStatements nothing is prepared either.
func TestPreparedNotForChangingTextOrWhenTurnedOff(t *testing.T) {
	t.Parallel()
	const items = 100
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_prepared_now", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', run_at DATETIME(6) NOT NULL, queue VARCHAR(16) NOT NULL, INDEX (queue, status, id)")
	for _, tc := range []struct {
		queue string
		query bunqueue.QueryFunc
		cfg   bunqueue.Config
	}{
		{"changing", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("queue = 'changing'").Where("status = 'waiting'").Where("run_at <= ?", time.Now()).Order("id")
		}, bunqueue.Config{}},
		{"off", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("queue = 'off'").Where("status = 'waiting'").Order("id")
		}, bunqueue.Config{NoPreparedStatements: true}},
	} {
		t.Run(tc.queue, func(t *testing.T) {
			base := map[string]int{"changing": 0, "off": items}[tc.queue]
			var vals []string
			for i := range items {
				vals = append(vals, fmt.Sprintf("(%d, '2000-01-01', '%s')", base+i+1, tc.queue))
			}
			dbtest.Exec(t, db, "INSERT INTO bq_test_prepared_now (id, run_at, queue) VALUES "+strings.Join(vals, ", "))
			q := bunqueue.NewQueue(tc.queue, tc.query, markDone[preparedNowItem], &bunqueue.QueueConfig[preparedNowItem]{Workers: 2, BatchSize: 1})
			tel := newTelBundle(t)
			c := tel.client(t, db, tc.cfg, q)
			start(t, c)
			eventually(t, 30*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bq_test_prepared_now WHERE queue = ? AND status = 'waiting'", tc.queue) == 0
			}, "the queue drains")
			require.Equal(t, items, count(t, db, "SELECT COUNT(*) FROM bq_test_prepared_now WHERE queue = ? AND status = 'done'", tc.queue))
			claims, rechecks := preparedSpans(tel.spans, "bq_test_prepared_now")
			require.Zero(t, len(claims), "claims ran prepared")
			require.Zero(t, len(rechecks), "re-checks ran prepared")
		})
	}
}

// Jobs at one per transaction: the lock-mode claim and the job's DELETE
// run prepared (the library's own worker skips the re-check), and every
// job runs once.
func TestPreparedJobClaims(t *testing.T) {
	t.Parallel()
	const jobs = 200
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	tel := newTelBundle(t)
	c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 3, BatchSize: 1}}})
	var runs atomic.Int64
	seen := map[int64]int{}
	var mu = make(chan struct{}, 1)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[tracedArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[tracedArgs]) error {
		runs.Add(1)
		mu <- struct{}{}
		seen[job.ID]++
		<-mu
		return nil
	})))
	for range jobs {
		_, err := c.Enqueue(t.Context(), db, tracedArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	start(t, c)
	eventually(t, 30*time.Second, func() bool {
		return runs.Load() >= jobs && count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "the jobs run")
	require.Len(t, seen, jobs)
	for id, n := range seen {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}
	claims, _ := preparedSpans(tel.spans, "bunqueue_jobs")
	require.NotEmpty(t, claims, "no job claim ran prepared")
	deletes := spansOf(tel.spans, spanAll(spanNamed("DELETE bunqueue_jobs"), spanHas("db.operation.name", "DELETE")))
	require.NotEmpty(t, deletes, "no job's DELETE ran prepared")
	for _, s := range append(claims, deletes...) {
		require.Equal(t, codes.Unset, s.Status.Code, "a prepared statement failed: %s", s.Status.Description)
	}
	t.Logf("%d prepared claims, %d prepared DELETEs for %d jobs", len(claims), len(deletes), jobs)
}

type preparedHookedItem struct {
	bun.BaseModel `bun:"table:bq_test_prepared_hooked"`
	ID            int64 `bun:",pk"`
	Status        string
}

var preparedHookCalls atomic.Int64

func (*preparedHookedItem) BeforeSelect(context.Context, *bun.SelectQuery) error {
	preparedHookCalls.Add(1)
	return nil
}

// A model with a select hook is claimed in text, through bun, so that the
// hook runs for every claim.
func TestPreparedNotForModelsWithSelectHooks(t *testing.T) {
	t.Parallel()
	const items = 100
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_prepared_hooked", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	insertIDs(t, db, "bq_test_prepared_hooked", items)
	q := bunqueue.NewQueue("prepared-hooked", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}, markDone[preparedHookedItem], &bunqueue.QueueConfig[preparedHookedItem]{Workers: 2, BatchSize: 1})
	tel := newTelBundle(t)
	start(t, tel.client(t, db, bunqueue.Config{}, q))
	waitDrained(t, db, "bq_test_prepared_hooked", 30*time.Second)
	claims, rechecks := preparedSpans(tel.spans, "bq_test_prepared_hooked")
	require.Zero(t, len(claims), "claims ran prepared")
	require.Zero(t, len(rechecks), "re-checks ran prepared")
	// Each row's claim and re-check ran the hook (the feed's reads too).
	require.GreaterOrEqual(t, preparedHookCalls.Load(), int64(2*items))
}

type preparedAlterItem struct {
	bun.BaseModel `bun:"table:bq_test_prepared_alter"`
	ID            int64 `bun:",pk"`
	Status        string
	Note          string
}

// A migration that changes a column's type while the workers run: on
// PostgreSQL the prepared claims then fail once per connection ("cached
// plan must not change result type"); bunqueue drops the statement, and
// every row is processed once all the same. MySQL and MariaDB prepare the
// statement again by themselves.
func TestPreparedClaimsSurviveASchemaChange(t *testing.T) {
	t.Parallel()
	const items = 400
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_prepared_alter", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', note VARCHAR(16) NOT NULL DEFAULT '', INDEX (status, id)")
	createTable(t, db, "bq_test_prepared_alter_effect", "item_id BIGINT NOT NULL, UNIQUE KEY (item_id)")
	insertIDs(t, db, "bq_test_prepared_alter", items/2)
	q := bunqueue.NewQueue("prepared-alter", func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Order("id")
	}, func(ctx context.Context, tx bun.Tx, it *preparedAlterItem) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO bq_test_prepared_alter_effect (item_id) VALUES (?)", it.ID); err != nil {
			return err
		}
		_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
		return err
	}, &bunqueue.QueueConfig[preparedAlterItem]{Workers: 3, BatchSize: 1, PollInterval: 20 * time.Second})
	tel := newTelBundle(t)
	c := tel.client(t, db, bunqueue.Config{}, q)
	start(t, c)
	// The workers keep their sessions, and the statements prepared on
	// them, while they wait less than a poll interval for work: a long
	// one, so that a loaded machine's pauses between rounds do not end
	// them. The rows inserted through the wake-up hook wake them.
	hooked := db.WithQueryHook(c.QueryHook())
	done := func() int { return count(t, db, "SELECT COUNT(*) FROM bq_test_prepared_alter WHERE status = 'done'") }
	eventually(t, 30*time.Second, func() bool { return done() == items/2 }, "the first half is processed")
	claims, _ := preparedSpans(tel.spans, "bq_test_prepared_alter")
	require.NotEmpty(t, claims, "no claim ran prepared before the change")

	// The change fails a prepared claim only on a connection that had
	// prepared it before; which connection the pool hands a worker is not
	// for the test to choose, so on PostgreSQL the change is made again,
	// to another type, until a claim failed (a failed statement runs in
	// text for a while, so one failure is all a round can show).
	failed, next := 0, int64(items/2+1)
	for round := 0; round < 6 && (round == 0 || isPG(db) && failed == 0); round++ {
		alterNote(t, db, round)
		insertRange(t, hooked, "bq_test_prepared_alter", next, next+items/2)
		next += items / 2
		eventually(t, 30*time.Second, func() bool { return done() == int(next-1) }, "the rows after change %d are processed", round+1)
		failed = 0
		for _, s := range spansOf(tel.spans, spanAll(spanNamed("SELECT bq_test_prepared_alter"))) {
			if s.Status.Code == codes.Error {
				failed++
				t.Logf("a prepared statement failed: %s", s.Status.Description)
			}
		}
		t.Logf("%d prepared statements failed after %d changes", failed, round+1)
	}
	require.Equal(t, int(next-1), count(t, db, "SELECT COUNT(*) FROM bq_test_prepared_alter_effect"), "one effect per item")
	if isPG(db) {
		require.Positive(t, failed, "no change made a prepared claim fail: the test did not reach the failure")
	} else {
		require.Zero(t, failed)
	}
}

// alterNote changes the type of bq_test_prepared_alter's note column, to
// another type in each round on PostgreSQL.
func alterNote(t *testing.T, db *bun.DB, round int) {
	t.Helper()
	if !isPG(db) {
		dbtest.Exec(t, db, fmt.Sprintf("ALTER TABLE bq_test_prepared_alter MODIFY note VARCHAR(%d) NOT NULL DEFAULT ''", 64+round))
		return
	}
	typ := "TEXT"
	if round%2 == 1 {
		typ = "VARCHAR(64)"
	}
	dbtest.Exec(t, db, "ALTER TABLE bq_test_prepared_alter ALTER COLUMN note TYPE "+typ)
}

// insertRange inserts the rows of ids from to before (excluded) into table.
func insertRange(t *testing.T, db *bun.DB, table string, from, before int64) {
	t.Helper()
	var vals []string
	for id := from; id < before; id++ {
		vals = append(vals, fmt.Sprintf("(%d)", id))
	}
	dbtest.Exec(t, db, "INSERT INTO "+table+" (id) VALUES "+strings.Join(vals, ", "))
}
