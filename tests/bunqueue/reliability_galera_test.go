package bunqueue_test

// Scenario 9 of the reliability suite: a multi-primary cluster (a Galera
// cluster of three MariaDB nodes, from scripts/galera.sh; see
// docs/galera.md). Three clients with their own pools process the same
// queue, either one client per node or all of them on one node. Each
// handler inserts its effect through the item's transaction into a table
// with a UNIQUE key on the item, and into the workload's effects table
// without one (where an effect committed twice is a second row).
//
// One client per node breaks "never two workers on one item at a time"
// (row locks are local to a node): the test reports the handler runs, the
// overlapping runs and the batches that failed at certification (1213)
// instead of asserting none; it asserts what still holds, that nothing is
// lost and no effect commits twice. On one node, it asserts no overlap and
// few re-runs.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// galeraRows is how many items each Galera scenario runs.
const galeraRows = 3000

func TestReliabilityGalera(t *testing.T) {
	relParallel(t)
	dsns := galeraDSNs(t)
	require.NoError(t, bunqueue.Migrate(t.Context(), openNode(t, dsns[0])))
	for _, mode := range []string{"table", "lock"} {
		t.Run("one client per node/"+mode, func(t *testing.T) {
			g := runGalera(t, mode, dsns)
			// Reported, not asserted: what multi-node routing costs.
			t.Logf("galera: one client per node (%s): %d overlapping runs and %d batches failed with 1213 are the documented failure of workers on several nodes", g.rep.Mode, g.rep.Concurrent, g.deadlocks)
		})
		t.Run("all clients on one node/"+mode, func(t *testing.T) {
			g := runGalera(t, mode, []string{dsns[0], dsns[0], dsns[0]})
			require.Zero(t, g.rep.Concurrent, "no item ran on two workers at once on one node")
			require.LessOrEqual(t, g.runs-galeraRows, galeraRows/50, "re-runs on one node stay under 2%% of the items")
		})
	}
}

// galeraRun is what one Galera scenario measured.
type galeraRun struct {
	rep           relReport
	runs          int // handler runs
	deadlocks     int // batches that failed with 1213
	itemDeadlocks int // items that failed with 1213 (in their savepoint)
}

// runGalera runs galeraRows items of mode with one client per DSN of dsns
// (4 workers each, self-sized batches), checks that none was lost and no
// effect committed twice, and reports the figures.
func runGalera(t *testing.T, mode string, dsns []string) galeraRun {
	first := openNode(t, dsns[0])
	w := newRelWorkload(t, first, mode)
	unique := relEffectsTable(t, first, "bq_rel_geff")
	dbtest.Exec(t, first, "ALTER TABLE "+unique+" ADD UNIQUE KEY (item)")
	w.fail = func(ctx context.Context, db bun.IDB, item int64) error {
		_, err := db.NewRaw("INSERT INTO ? (item) VALUES (?)", bun.Ident(unique), item).Exec(ctx)
		return err
	}
	log, logged := leaseCaptureLogger(t)
	for _, dsn := range dsns {
		w.addClient(openNode(t, dsn), 4, 0, bunqueue.Config{Logger: log}, nil)
	}
	require.NoError(t, w.produce(0, galeraRows))
	began := time.Now()
	w.start()
	require.True(t, relWaitFor(3*time.Minute, func() bool { return w.remaining() == 0 }), "every item left the queue")
	took := time.Since(began)
	w.stop()
	galeraSync(t, first, w.effects)

	g := galeraRun{rep: relReport{Scenario: "Galera, " + galeraRouting(dsns), Mode: w.modeName(), Enqueued: galeraRows, Duration: took}}
	g.runs = len(w.rec.all())
	g.rep.Concurrent, _ = relOverlaps(w.rec.all(), nil)
	g.rep.Processed, g.rep.Twice = relEffects(t, first, w.effects)
	g.rep.Lost = galeraRows - g.rep.Processed
	for _, line := range strings.Split(logged(), "\n") {
		switch {
		case !strings.Contains(line, "1213"):
		case strings.Contains(line, "batch failed"):
			g.deadlocks++
		case strings.Contains(line, "item failed") || strings.Contains(line, "bunqueue: job "):
			g.itemDeadlocks++
		}
	}
	g.rep.note("%d handler runs for %d items", g.runs, galeraRows)
	g.rep.note("%d batches and %d items failed with 1213", g.deadlocks, g.itemDeadlocks)
	g.rep.note("%.0f items/s", float64(galeraRows)/took.Seconds())
	g.rep.log(t)
	require.Zero(t, g.rep.Lost, "items lost")
	require.Zero(t, g.rep.Twice, "items whose effect committed twice")
	require.Equal(t, galeraRows, count(t, first, "SELECT COUNT(*) FROM "+unique), "one effect per item under the unique key")
	return g
}

// galeraRouting says where the clients of dsns run.
func galeraRouting(dsns []string) string {
	for _, dsn := range dsns[1:] {
		if dsn != dsns[0] {
			return "one client per node"
		}
	}
	return "all clients on one node"
}

// galeraSync waits until the node of db has applied every transaction
// the cluster committed (a read of table with wsrep_sync_wait), so that
// its counts include the other nodes' commits.
func galeraSync(t *testing.T, db *bun.DB, table string) {
	t.Helper()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), "SET SESSION wsrep_sync_wait = 1")
	require.NoError(t, err)
	_, err = conn.ExecContext(t.Context(), "SELECT COUNT(*) FROM "+table)
	require.NoError(t, err)
	_, err = conn.ExecContext(t.Context(), "SET SESSION wsrep_sync_wait = 0")
	require.NoError(t, err)
}

// A transactional Enqueue with a UniqueKey: on one node, the second
// transaction waits for the first's unique key and, once it commits,
// gets Duplicate; on two nodes, neither sees the other, both insert, and
// the second to commit fails certification with 1213.
func TestGaleraEnqueueUniqueKey(t *testing.T) {
	t.Parallel()
	dsns := galeraDSNs(t)
	first, second := openNode(t, dsns[0]), openNode(t, dsns[1])
	require.NoError(t, bunqueue.Migrate(t.Context(), first))
	queue := ownJobQueue(t, first)
	c := jobsTestClient(t, first, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	// enqueue begins a transaction on db and enqueues the job of key in it.
	enqueue := func(db *bun.DB, key string) (bun.Tx, bunqueue.EnqueueResult, error) {
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			return tx, bunqueue.EnqueueResult{}, err
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		res, err := c.Enqueue(t.Context(), tx, relJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, UniqueKey: key})
		return tx, res, err
	}

	key := dbtest.Name("one-node")
	tx1, res1, err := enqueue(first, key)
	require.NoError(t, err)
	type result struct {
		res bunqueue.EnqueueResult
		err error
	}
	got := make(chan result, 1)
	go func() { _, res, err := enqueue(first, key); got <- result{res, err} }()
	time.Sleep(200 * time.Millisecond) // the second, most likely, waits for the key
	require.NoError(t, tx1.Commit())
	r2 := <-got
	require.NoError(t, r2.err)
	require.True(t, r2.res.Duplicate, "on one node the second Enqueue is a duplicate")
	require.Equal(t, res1.ID, r2.res.ID)

	key = dbtest.Name("two-nodes")
	tx1, _, err = enqueue(first, key)
	require.NoError(t, err)
	tx2, res2, err := enqueue(second, key)
	require.NoError(t, err)
	require.False(t, res2.Duplicate, "the other node does not see the first insert")
	require.NoError(t, tx1.Commit())
	err = tx2.Commit()
	t.Logf("galera: the second commit of a UniqueKey enqueue on another node: %v", err)
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	require.EqualValues(t, 1213, me.Number, "certification fails the second commit")
	galeraSync(t, first, "bunqueue_jobs")
	require.Equal(t, 1, count(t, first, "SELECT COUNT(*) FROM bunqueue_jobs WHERE unique_key = ?", key))
}
