package bunqueue_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// scratchOn opens a pool on an empty database of the test's own on srv,
// dropped when the test ends.
func scratchOn(t *testing.T, srv dbtest.Server, prefix string) *bun.DB {
	t.Helper()
	switch srv.Name {
	case "postgres":
		return dbtest.OpenPGDSN(t, dbtest.PGDatabaseDSN(t, dbtest.ScratchPGDatabase(t, prefix, nil)), 0)
	case "sqlite":
		return dbtest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), prefix+".db"), 0)
	}
	return dbtest.OpenDSN(t, dbtest.Scratch(t, prefix), 0)
}

// enqueueCtl enqueues n jobs to queue.
func enqueueCtl(t *testing.T, db *bun.DB, queue string, n int) {
	t.Helper()
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	batch := make([]bunqueue.EnqueueParams, n)
	for i := range batch {
		batch[i] = bunqueue.EnqueueParams{Args: ctlArgs{N: i}, Opts: &bunqueue.EnqueueOpts{Queue: queue}}
	}
	_, err := c.EnqueueMany(t.Context(), db, batch)
	require.NoError(t, err)
}

// syncBuffer is a log destination that handlers may write to at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start explains the job listings of a client that runs jobs: with every
// index of schema version 4 in place it starts under StrictQueryPlans,
// also once the server has statistics of a table of three jobs;
// without the (state, queue, id) index it fails with StrictQueryPlans,
// naming the index, and warns without.
func TestStartChecksJobListPlans(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := scratchOn(t, srv, "bq_test_listplan")
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		start := func(strict bool, log *syncBuffer) error {
			logger := testLogger(t)
			if log != nil {
				logger = slog.New(slog.NewTextHandler(log, nil))
			}
			c := jobsTestClient(t, db, bunqueue.Config{StrictQueryPlans: strict, Logger: logger,
				JobQueues: map[string]bunqueue.JobQueueConfig{"listplan": {}}})
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ctlArgs](func(context.Context, bun.IDB, *bunqueue.Job[ctlArgs]) error {
				return nil
			})))
			err := c.Start(t.Context())
			if err == nil {
				require.NoError(t, c.Stop(t.Context()))
			}
			return err
		}
		require.NoError(t, start(true, nil), "every listing is served by an index")
		// With statistics of a table that holds other queues' jobs only,
		// PostgreSQL's planner may prefer the primary key even under
		// PreferIndexes: the index exists, so no warning.
		enqueueCtl(t, db, "listplan_other", 2000)
		analyze(t, db)
		require.NoError(t, start(true, nil), "a small table may be planned otherwise; its indexes are there")

		drop := "DROP INDEX " + tables.Default.Index(migrate.ListQueueIndex)
		if srv.Name == "mysql" {
			drop += " ON " + tables.Default.Jobs
		}
		dbtest.Exec(t, db, drop)
		err := start(true, nil)
		require.Error(t, err)
		require.Contains(t, err.Error(), tables.Default.Index(migrate.ListQueueIndex))
		require.Contains(t, err.Error(), "StrictQueryPlans")
		t.Log(err)

		var log syncBuffer
		require.NoError(t, start(false, &log), "without StrictQueryPlans a missing listing index is a warning")
		require.Contains(t, log.String(), "level=WARN")
		require.Contains(t, log.String(), tables.Default.Index(migrate.ListQueueIndex))
	})
}
