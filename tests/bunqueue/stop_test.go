package bunqueue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type stopItem struct {
	bun.BaseModel `bun:"table:bq_test_stop"`
	ID            int64 `bun:",pk"`
	Status        string
}

func stopQuery(q *bun.SelectQuery) *bun.SelectQuery {
	return q.Where("status = 'waiting'").Order("id")
}

func TestStopWaitsForTheItemInFlight(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_stop", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_stop (id) VALUES (1)")

	inHandler, release := make(chan struct{}), make(chan struct{})
	q := bunqueue.NewQueue("stop", stopQuery, func(ctx context.Context, tx bun.Tx, it *stopItem) error {
		close(inHandler)
		<-release
		_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
		return err
	}, nil)
	c := newClient(t, db, q)
	require.NoError(t, c.Start(t.Context()))
	<-inHandler

	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while an item was in flight: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-stopped)
	require.Equal(t, "done", str(t, db, "SELECT status FROM bq_test_stop WHERE id = 1"), "the in-flight item committed")
	require.NoError(t, c.Stop(context.Background()), "Stop twice")
}

type cancelItem struct {
	bun.BaseModel `bun:"table:bq_test_stop_cancel"`
	ID            int64 `bun:",pk"`
	Status        string
}

func TestStopWithExpiredContextCancelsAndReleasesTheRow(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_stop_cancel", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_stop_cancel (id) VALUES (1)")

	inHandler := make(chan struct{})
	var cancelled atomic.Bool
	q := bunqueue.NewQueue("stop-cancel", stopQuery, func(ctx context.Context, tx bun.Tx, it *cancelItem) error {
		if _, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx); err != nil {
			return err
		}
		close(inHandler)
		<-ctx.Done() // slow work that honours its context
		cancelled.Store(true)
		return ctx.Err()
	}, nil)
	c := newClient(t, db, q)
	require.NoError(t, c.Start(t.Context()))
	<-inHandler

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := c.Stop(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, cancelled.Load(), "the handler's context was cancelled")

	// The row is back: not done, and not locked by anyone.
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_stop_cancel WHERE id = 1"))
	other := bunqueue.NewQueue("stop-cancel", stopQuery, func(ctx context.Context, tx bun.Tx, it *cancelItem) error { return nil }, nil)
	newClient(t, dbtest.Open(t, 0), other)
	n, err := other.Count(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the row is in the queue and unlocked")
}
