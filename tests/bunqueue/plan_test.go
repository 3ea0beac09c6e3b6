package bunqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// planColumns are the seed article's columns, and a column no index has.
const planColumns = "id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL, retry_at DATETIME NULL, payload TEXT, note VARCHAR(20) NULL"

// planRow is a row of a plan test's table.
type planRow struct {
	ID      int64 `bun:",pk,autoincrement"`
	Status  string
	RetryAt *time.Time
	Payload *string
	Note    *string
}

type planSeed struct {
	bun.BaseModel `bun:"table:bq_test_plan_seed"`
	planRow
}

type planIndexed struct {
	bun.BaseModel `bun:"table:bq_test_plan_indexed"`
	planRow
}

type planUnindexed struct {
	bun.BaseModel `bun:"table:bq_test_plan_unindexed"`
	planRow
}

type planStrict struct {
	bun.BaseModel `bun:"table:bq_test_plan_strict"`
	planRow
}

type planBroken struct {
	bun.BaseModel `bun:"table:bq_test_plan_broken"`
	planRow
}

// planQueue returns a queue of the rows that match where, in id order,
// whose handler marks them done.
func planQueue[T any](name, where string) *bunqueue.Queue[T] {
	return bunqueue.NewQueue(name,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where(where).Order("id") },
		func(ctx context.Context, tx bun.Tx, item *T) error {
			_, err := tx.NewUpdate().Model(item).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, nil)
}

// planLog keeps a client's log records, written as JSON lines.
type planLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *planLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// warnings returns the messages of the warnings about queue, and the
// whole log.
func (l *planLog) warnings(t *testing.T, queue string) ([]string, string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["level"] == "WARN" && rec["queue"] == queue {
			msgs = append(msgs, rec["msg"].(string))
		}
	}
	return msgs, l.buf.String()
}

// planClient returns a client over db whose log planLog keeps.
func planClient(t *testing.T, db *bun.DB, cfg bunqueue.Config, queues ...bunqueue.AnyQueue) (*bunqueue.Client, *planLog) {
	t.Helper()
	log := &planLog{}
	cfg.PollInterval = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(log, nil))
	c, err := bunqueue.NewClient(db, &cfg)
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, c.Add(q))
	}
	return c, log
}

// The seed article's schema, INDEX (status, retry_at), under its queue
// WHERE status = 'pending' ORDER BY id: Start warns, naming the queue, the
// plan and the index (status, id), and the workers run. With that index,
// created from the warning, a new Start does not warn.
func TestPlanWarnsOfTheSeedSchema(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_plan_seed", planColumns+", INDEX (status, retry_at)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_plan_seed (status) VALUES ('pending'), ('pending'), ('done')")

	c, log := planClient(t, db, bunqueue.Config{}, planQueue[planSeed]("plan-seed", "status = 'pending'"))
	start(t, c)
	warnings, all := log.warnings(t, "plan-seed")
	require.Len(t, warnings, 1, "log:\n%s", all)
	w := warnings[0]
	t.Log(w)
	if isPG(db) {
		require.Contains(t, w, `bunqueue: queue "plan-seed": its query's plan has a sort`)
		require.Contains(t, w, "Sort Key: id")
	} else {
		require.Contains(t, w, `bunqueue: queue "plan-seed": its query's plan has a filesort`)
		require.Contains(t, w, "(plan: bq_test_plan_seed: type=")
		require.Contains(t, w, "Using filesort")
	}
	index := quoteBackticks(db, "CREATE INDEX `bq_test_plan_seed_status_id` ON `bq_test_plan_seed` (`status`, `id`)")
	require.Contains(t, w, "an index that would serve it: "+index+" (a suggestion")
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_plan_seed WHERE status = 'pending'") == 0
	}, "a warning does not stop the workers")

	dbtest.Exec(t, db, index)
	c, log = planClient(t, db, bunqueue.Config{}, planQueue[planSeed]("plan-seed", "status = 'pending'"))
	start(t, c)
	warnings, all = log.warnings(t, "plan-seed")
	require.Empty(t, warnings, "the suggested index serves the query; log:\n%s", all)
}

// With an index that serves the query from the start, and with a range
// condition beside the equality, nothing is warned.
func TestPlanDoesNotWarnWithAMatchingIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_plan_indexed", planColumns+", INDEX (status, id)")
	c, log := planClient(t, db, bunqueue.Config{StrictQueryPlans: true},
		planQueue[planIndexed]("plan-indexed", "status = 'pending'"),
		planQueue[planIndexed]("plan-indexed-retry", "status = 'pending' AND (retry_at IS NULL OR retry_at <= "+nowSQL(db)+")"))
	start(t, c)
	for _, q := range []string{"plan-indexed", "plan-indexed-retry"} {
		warnings, all := log.warnings(t, q)
		require.Empty(t, warnings, "log:\n%s", all)
	}
}

// A condition on a column no index has makes the server scan: warned,
// with an index that leads with that column.
func TestPlanWarnsOfAScan(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_plan_unindexed", planColumns+", INDEX (status, id)")
	c, log := planClient(t, db, bunqueue.Config{}, planQueue[planUnindexed]("plan-unindexed", "note = 'urgent'"))
	start(t, c)
	warnings, all := log.warnings(t, "plan-unindexed")
	require.Len(t, warnings, 1, "log:\n%s", all)
	t.Log(warnings[0])
	scan := `^bunqueue: queue "plan-unindexed": its query's plan has a full (table|index) scan of bq_test_plan_unindexed`
	if isPG(db) { // PostgreSQL sorts what it scans
		scan = `^bunqueue: queue "plan-unindexed": its query's plan has a sort and a full table scan of bq_test_plan_unindexed`
	}
	require.Regexp(t, scan, warnings[0])
	require.Contains(t, warnings[0], quoteBackticks(db, "CREATE INDEX `bq_test_plan_unindexed_note_id` ON `bq_test_plan_unindexed` (`note`, `id`)"))
}

type planArgs struct{}

func (planArgs) Kind() string { return "t_plan" }

// The jobs queues, in lock and in lease mode, read bunqueue_jobs through
// the claim index Migrate creates: nothing to warn about, even when
// strict.
func TestPlanDoesNotWarnOfTheJobsQueues(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	lock, lease := jobQueue(t), jobQueue(t)
	c, log := planClient(t, db, bunqueue.Config{
		StrictQueryPlans: true,
		JobQueues: map[string]bunqueue.JobQueueConfig{
			lock:  {},
			lease: {Mode: bunqueue.ModeLease},
		},
	})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[planArgs](func(context.Context, bun.IDB, *bunqueue.Job[planArgs]) error {
		return nil
	})))
	start(t, c)
	for _, q := range []string{lock, lease} {
		warnings, all := log.warnings(t, q)
		require.Empty(t, warnings, "log:\n%s", all)
	}
}

// With Config.StrictQueryPlans, Start refuses the seed article's schema
// with an error that names the queue, runs nothing, and may be retried
// once the index exists.
func TestPlanStrictRefusesStart(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_plan_strict", planColumns+", INDEX (status, retry_at)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_plan_strict (status) VALUES ('pending')")

	c, log := planClient(t, db, bunqueue.Config{StrictQueryPlans: true}, planQueue[planStrict]("plan-strict", "status = 'pending'"))
	err := startMust(t, c, 15*time.Second)
	if isPG(db) {
		require.ErrorContains(t, err, `bunqueue: queue "plan-strict": its query's plan has a sort`)
	} else {
		require.ErrorContains(t, err, `bunqueue: queue "plan-strict": its query's plan has a filesort`)
	}
	require.ErrorContains(t, err, quoteBackticks(db, "CREATE INDEX `bq_test_plan_strict_status_id` ON `bq_test_plan_strict` (`status`, `id`)"))
	require.ErrorContains(t, err, "Config.StrictQueryPlans is set")
	warnings, _ := log.warnings(t, "plan-strict")
	require.Empty(t, warnings, "an error, not a warning")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_test_plan_strict WHERE status = 'pending'"), "nothing ran")

	dbtest.Exec(t, db, "CREATE INDEX bq_test_plan_strict_claim ON bq_test_plan_strict (status, id)")
	require.NoError(t, startMust(t, c, 15*time.Second), "a refused Start can be retried")
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_plan_strict WHERE status = 'pending'") == 0
	}, "the workers run")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

// A query the server cannot run (here, an unknown column) is refused by
// Start, strict or not: it is broken SQL, not a slow plan (see also
// TestQueueQueryRefusedByServerFailsStart).
func TestPlanOfABrokenQuery(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_plan_broken", planColumns)

	for _, strict := range []bool{false, true} {
		c, _ := planClient(t, db, bunqueue.Config{StrictQueryPlans: strict}, planQueue[planBroken]("plan-broken", "no_such_column = 1"))
		err := startMust(t, c, 15*time.Second)
		require.ErrorContains(t, err, `bunqueue: queue "plan-broken": the server refuses its query`)
		require.ErrorContains(t, err, "no_such_column")
		require.NoError(t, c.Stop(t.Context()))
	}
}
