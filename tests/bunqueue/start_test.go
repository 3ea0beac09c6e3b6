package bunqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// startTestTable drops name (a table or a view), runs create, and drops
// name again when the test ends.
func startTestTable(t *testing.T, db *bun.DB, name, create string) {
	t.Helper()
	drop := func() {
		_, _ = db.Exec("DROP VIEW IF EXISTS " + name)
		_, _ = db.Exec("DROP TABLE IF EXISTS " + name)
	}
	drop()
	dbtest.Exec(t, db, create)
	t.Cleanup(drop)
}

// startQueue returns a queue over T that marks rows done.
func startQueue[T any](name string, cfg *bunqueue.QueueConfig[T]) *bunqueue.Queue[T] {
	return bunqueue.NewQueue(name,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, item *T) error {
			_, err := tx.NewUpdate().Model(item).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, cfg)
}

// startMust runs Start with a deadline and fails the test if it does not
// return in time: a Start that refuses must refuse promptly.
func startMust(t *testing.T, c *bunqueue.Client, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("Start did not return within %s", within)
		return nil
	}
}

type startMissing struct {
	bun.BaseModel `bun:"table:bq_test_start_missing"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestStartRefusesAMissingTable(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS bq_test_start_missing")
	c := newClient(t, db, startQueue[startMissing]("missing", nil))

	err := startMust(t, c, 15*time.Second)
	require.ErrorContains(t, err, `queue "missing"`)
	require.ErrorContains(t, err, "table bq_test_start_missing does not exist")
	require.NoError(t, c.Stop(t.Context()))
}

type startMyISAM struct {
	bun.BaseModel `bun:"table:bq_test_start_myisam"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestStartRefusesAMyISAMTable(t *testing.T) {
	t.Parallel()
	dbtest.OnlyMySQL(t, "MyISAM is a MySQL storage engine")
	db := dbtest.Open(t, 0)
	startTestTable(t, db, "bq_test_start_myisam",
		"CREATE TABLE bq_test_start_myisam (id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)) ENGINE=MyISAM")
	c := newClient(t, db, startQueue[startMyISAM]("myisam", nil))

	err := startMust(t, c, 15*time.Second)
	require.ErrorContains(t, err, `queue "myisam"`)
	require.ErrorContains(t, err, "table bq_test_start_myisam uses the MyISAM engine")
	require.ErrorContains(t, err, "ENGINE=InnoDB", "the message says how to fix it")
	require.NoError(t, c.Stop(t.Context()))
}

type startView struct {
	bun.BaseModel `bun:"table:bq_test_start_view"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestStartRefusesAView(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	startTestTable(t, db, "bq_test_start_view_base",
		"CREATE TABLE bq_test_start_view_base (id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE) ENGINE=InnoDB")
	startTestTable(t, db, "bq_test_start_view",
		"CREATE VIEW bq_test_start_view AS SELECT id, done FROM bq_test_start_view_base")
	c := newClient(t, db, startQueue[startView]("view", nil))

	err := startMust(t, c, 15*time.Second)
	require.ErrorContains(t, err, `queue "view"`)
	require.ErrorContains(t, err, "bq_test_start_view is a view, not a table")
	require.NoError(t, c.Stop(t.Context()))
}

type startPool struct {
	bun.BaseModel `bun:"table:bq_test_start_pool"`
	ID            int64 `bun:",pk"`
	Done          bool
}

func TestStartRefusesAPoolTooSmallForTheWorkers(t *testing.T) {
	t.Parallel()
	admin := dbtest.Open(t, 0)
	startTestTable(t, admin, "bq_test_start_pool",
		"CREATE TABLE bq_test_start_pool (id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)) ENGINE=InnoDB")
	dbtest.Exec(t, admin, "INSERT INTO bq_test_start_pool (id) VALUES (1), (2), (3)")

	// Four workers over a pool of two: refused, promptly.
	small := dbtest.Open(t, 2)
	c := newClient(t, small, startQueue[startPool]("pool", &bunqueue.QueueConfig[startPool]{Workers: 4}))
	err := startMust(t, c, 5*time.Second)
	require.ErrorContains(t, err, "the connection pool allows 2 connections but the queues run 4 workers")
	require.ErrorContains(t, err, "SetMaxOpenConns")
	require.NoError(t, c.Stop(t.Context()))
	require.Equal(t, 3, count(t, admin, "SELECT COUNT(*) FROM bq_test_start_pool WHERE done = FALSE"), "nothing ran")

	// The workers summed over queues count, and the bound is workers +
	// queues + 1: two queues of 2 workers on a pool of 6 are refused, on 7
	// they run.
	tight := dbtest.Open(t, 6)
	c = newClient(t, tight,
		startQueue[startPool]("pool-a", &bunqueue.QueueConfig[startPool]{Workers: 2}),
		startQueue[startPool]("pool-b", &bunqueue.QueueConfig[startPool]{Workers: 2}))
	require.ErrorContains(t, startMust(t, c, 5*time.Second), "allows 6 connections but the queues run 4 workers")
	require.NoError(t, c.Stop(t.Context()))

	enough := dbtest.Open(t, 7)
	c = newClient(t, enough,
		startQueue[startPool]("pool-a", &bunqueue.QueueConfig[startPool]{Workers: 2}),
		startQueue[startPool]("pool-b", &bunqueue.QueueConfig[startPool]{Workers: 2}))
	require.NoError(t, startMust(t, c, 15*time.Second))
	eventually(t, 10*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bq_test_start_pool WHERE done = FALSE") == 0
	}, "the workers drain the table")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

func TestStartAndStopLifecycle(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)

	t.Run("start twice, then start after stop", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, db)
		require.NoError(t, c.Start(t.Context()))
		err := c.Start(t.Context())
		require.True(t, errors.Is(err, bunqueue.ErrStarted), "second Start: %v", err)
		require.NoError(t, c.Stop(t.Context()))
		require.NoError(t, c.Stop(t.Context()), "Stop twice is fine")
		err = c.Start(t.Context())
		require.True(t, errors.Is(err, bunqueue.ErrStopped), "Start after Stop: %v", err)
		require.NoError(t, c.Stop(t.Context()))
	})

	t.Run("stop without start", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, db)
		require.NoError(t, c.Stop(t.Context()))
		require.NoError(t, c.Stop(t.Context()))
		err := c.Start(t.Context())
		require.True(t, errors.Is(err, bunqueue.ErrStopped), "a stopped client does not start: %v", err)
	})

	t.Run("a refused start can be retried", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, dbtest.Open(t, 1))
		require.ErrorContains(t, c.Start(t.Context()), "allows 1 connections")
		err := c.Start(t.Context())
		require.False(t, errors.Is(err, bunqueue.ErrStarted), "a refused Start must not leave the client started: %v", err)
		require.NoError(t, c.Stop(t.Context()))
	})
}

type otherKeyRow struct {
	bun.BaseModel `bun:"table:bq_test_other_key"`
	Code          string `bun:",pk"`
	Status        string
}

// A model whose key is a unique column, not the table's PRIMARY KEY:
// Start warns that claims cannot lock by the PRIMARY index, and the queue
// works all the same.
func TestModelKeyThatIsNotThePrimaryKey(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_other_key", "id BIGINT AUTO_INCREMENT PRIMARY KEY, code VARCHAR(20) NOT NULL UNIQUE, status VARCHAR(20) NOT NULL, INDEX (status, code)")
	for i := range 50 {
		dbtest.Exec(t, db, "INSERT INTO bq_test_other_key (code, status) VALUES ('c"+itoa(i)+"', 'waiting')")
	}
	q := bunqueue.NewQueue("other-key",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("code") },
		func(ctx context.Context, tx bun.Tx, r *otherKeyRow) error {
			_, err := tx.NewUpdate().Model(r).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[otherKeyRow]{Workers: 4, BatchSize: 5})
	c, log := planClient(t, db, bunqueue.Config{}, q)
	start(t, c)
	eventually(t, 10*time.Second, func() bool {
		return count(t, db, "SELECT COUNT(*) FROM bq_test_other_key WHERE status = 'done'") == 50
	}, "every row processed")
	warnings, all := log.warnings(t, "other-key")
	require.Contains(t, warnings, "bunqueue: the model's primary key is not the table's PRIMARY KEY; claims lock rows by the model's key, which needs a unique index on it", all)
}
