package bunqueue_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// readRow is the columns of the feed tests' tables; each test has its
// own model over its own table.
type readRow struct {
	ID     int64 `bun:",pk"`
	Status string
}

type readItem struct {
	bun.BaseModel `bun:"table:bq_test_read"`
	readRow
}

type readLostItem struct {
	bun.BaseModel `bun:"table:bq_test_read_lost"`
	readRow
}

type readConnItem struct {
	bun.BaseModel `bun:"table:bq_test_read_conn"`
	readRow
}

// readQueue is a queue over T's table whose handler marks each row done
// and counts its runs in runs.
func readQueue[T any](name string, runs *sync.Map, workers, batch int, poll time.Duration, row func(*T) *readRow) *bunqueue.Queue[T] {
	return bunqueue.NewQueue(name,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *T) error {
			n, _ := runs.LoadOrStore(row(it).ID, new(int))
			*n.(*int)++ // one worker holds the row: no race
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[T]{Workers: workers, BatchSize: batch, PollInterval: poll})
}

func requireOnce(t *testing.T, runs *sync.Map, rows int) {
	t.Helper()
	seen := 0
	runs.Range(func(k, v any) bool {
		seen++
		require.Equal(t, 1, *v.(*int), "row %v ran %d times", k, *v.(*int))
		return true
	})
	require.Equal(t, rows, seen)
}

// The feed's reads, at READ UNCOMMITTED on MySQL and MariaDB, find rows
// that a transaction inserted and has not committed: they must not be
// processed before it commits, and must be, once, after. Rows of a
// transaction that rolls back are never processed.
func TestFeedUncommittedRows(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_read", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, INDEX (status, id)")
	var runs sync.Map
	c := newClient(t, db, readQueue("bq_test_read", &runs, 4, 0, 50*time.Millisecond, func(it *readItem) *readRow { return &it.readRow }))
	start(t, c)

	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for i := 1; i <= 20; i++ {
		_, err := tx.ExecContext(ctx, "INSERT INTO bq_test_read (id, status) VALUES (?, 'waiting')", i)
		require.NoError(t, err)
	}
	rolledBack, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for i := 101; i <= 110; i++ {
		_, err := rolledBack.ExecContext(ctx, "INSERT INTO bq_test_read (id, status) VALUES (?, 'waiting')", i)
		require.NoError(t, err)
	}
	// Several polls of the feed while both are open.
	time.Sleep(500 * time.Millisecond)
	n := 0
	runs.Range(func(any, any) bool { n++; return true })
	require.Zero(t, n, "rows of an uncommitted transaction were processed")

	require.NoError(t, rolledBack.Rollback())
	require.NoError(t, tx.Commit())
	eventually(t, 20*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_read WHERE status = 'done'") == 20
	}, "the committed rows are processed")
	time.Sleep(200 * time.Millisecond)
	requireOnce(t, &runs, 20)
}

// The feed's connection is lost (before a read is sent, and after, before
// its reply) again and again while the queue has work: every row is still
// processed, once.
func TestFeedReadConnectionLost(t *testing.T) {
	t.Parallel()
	admin := dbtest.Open(t, 0)
	const rows = 400
	createTable(t, admin, "bq_test_read_lost", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, INDEX (status, id)")
	for i := 1; i <= rows; i++ {
		dbtest.Exec(t, admin, "INSERT INTO bq_test_read_lost (id, status) VALUES ("+itoa(i)+", 'waiting')")
	}
	in := faultdriver.NewInjector(rand.Uint64())
	in.Add(faultdriver.Rule{Step: "read", Match: faultdriver.Contains(nil, "bunqueue: read bq_test_read_lost"),
		Faults: []faultdriver.Fault{faultdriver.DropBefore, faultdriver.DropAfter}, Every: 3})
	var runs sync.Map
	c := newClient(t, relFaultDB(t, in, 0), readQueue("bq_test_read_lost", &runs, 4, 5, 50*time.Millisecond, func(it *readLostItem) *readRow { return &it.readRow }))
	start(t, c)
	eventually(t, 60*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_test_read_lost WHERE status = 'done'") == rows
	}, "every row is processed")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))
	requireOnce(t, &runs, rows)
	counts := in.Counts()["read"]
	t.Logf("faults injected into the feed's reads: %v", counts)
	require.Positive(t, counts[faultdriver.DropBefore])
	require.Positive(t, counts[faultdriver.DropAfter])
}

// On MySQL and MariaDB the feed sets its connection up once and keeps it
// while the queue has work, rather than once per read.
func TestFeedKeepsItsConnection(t *testing.T) {
	t.Parallel()
	if dbtest.IsPostgres() {
		t.Skip("PostgreSQL's feed reads on the pool: it has no dirty reads to choose")
	}
	admin := dbtest.Open(t, 0)
	const rows = 300
	createTable(t, admin, "bq_test_read_conn", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, INDEX (status, id)")
	for i := 1; i <= rows; i++ {
		dbtest.Exec(t, admin, "INSERT INTO bq_test_read_conn (id, status) VALUES ("+itoa(i)+", 'waiting')")
	}
	in := faultdriver.NewInjector(1)
	// Rules whose fault never comes (probability 0): they count what they
	// match.
	never := []faultdriver.Fault{faultdriver.Deadlock}
	in.Add(
		faultdriver.Rule{Step: "setup", Match: faultdriver.Contains(nil, "READ UNCOMMITTED"), Faults: never},
		faultdriver.Rule{Step: "read", Match: faultdriver.Contains(nil, "bunqueue: read bq_test_read_conn"), Faults: never},
	)
	var runs sync.Map
	// The feed lets its connection go after a read that found nothing new
	// and a poll interval without a wake-up. With the other tests' 50 ms,
	// a loaded machine made that happen between busy reads (3 set-ups for
	// 13 reads, once in a full run here): a second leaves only what the
	// test is about.
	c := newClient(t, relFaultDB(t, in, 0), readQueue("bq_test_read_conn", &runs, 2, 1, time.Second, func(it *readConnItem) *readRow { return &it.readRow }))
	start(t, c)
	eventually(t, 60*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_test_read_conn WHERE status = 'done'") == rows
	}, "every row is processed")
	m := in.Matched()
	t.Logf("reads %d, connections set up %d", m["read"], m["setup"])
	// A read finds at most its window (2 workers: 32 keys) and the
	// rounding of its size (up to 15 more) of new rows: 300 rows take at
	// least 7 reads.
	require.GreaterOrEqual(t, m["read"], 7, "the workers take 2 rows a round: many reads")
	require.Positive(t, m["setup"])
	require.Less(t, m["setup"]*5, m["read"], "a connection set up per read or so")
	requireOnce(t, &runs, rows)
}
