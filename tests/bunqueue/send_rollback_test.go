package bunqueue_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/codes"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// A transactional Enqueue through a DB with the client's query hook ends
// its send span with the transaction: at COMMIT as before, at ROLLBACK
// marked rolled back (error.type rolled_back, status Error), and the job
// is not counted as sent. Outside such a transaction the span ends with
// Enqueue, as the README's Tracing section says.
func TestSendSpanOfARolledBackEnqueue(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		queue := ownJobQueue(t, db)
		tel := newTelBundle(t)
		c := tel.client(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
		app := db.WithQueryHook(c.QueryHook())
		sendSpan := spanNamed("send " + queue)
		jobs := func(id string) int {
			return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = "+id)
		}
		enqueue := func(ctx context.Context, db bun.IDB) string {
			res, err := c.Enqueue(ctx, db, tracedArgs{}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			return strconv.FormatInt(res.ID, 10)
		}
		refused := errors.New("signup refused")

		// Rolled back: the span waits for ROLLBACK, and says so.
		var id string
		err := app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
			id = enqueue(ctx, tx)
			require.Empty(t, spansOf(tel.spans, sendSpan), "the send span waits for the transaction")
			return refused
		})
		require.ErrorIs(t, err, refused)
		send := waitSpan(t, tel.spans, sendSpan, "the rolled-back send")
		require.Equal(t, codes.Error, send.Status.Code)
		require.Contains(t, send.Status.Description, "rolled back")
		requireAttrs(t, send, map[string]any{"error.type": "rolled_back", "messaging.message.id": id})
		require.Zero(t, jobs(id), "no such job")
		require.Zero(t, counter(t, tel.collect(t), "messaging.client.sent.messages", destination(queue)), "not sent")

		// Committed: unmarked, counted.
		tel.spans.Reset()
		require.NoError(t, app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
			id = enqueue(ctx, tx)
			return nil
		}))
		send = waitSpan(t, tel.spans, sendSpan, "the committed send")
		require.Equal(t, codes.Unset, send.Status.Code)
		requireAttrs(t, send, map[string]any{"error.type": nil, "messaging.message.id": id})
		require.Equal(t, 1, jobs(id))
		require.Equal(t, int64(1), counter(t, tel.collect(t), "messaging.client.sent.messages", destination(queue)))

		// Through the *bun.DB with the transaction's context: the job is
		// committed at once, and the rollback does not mark it. (Not on
		// SQLite: the *bun.DB waits there for the transaction's write
		// lock.)
		if srv.Name != "sqlite" {
			tel.spans.Reset()
			err = app.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
				id = enqueue(ctx, app)
				return refused
			})
			require.ErrorIs(t, err, refused)
			send = waitSpan(t, tel.spans, sendSpan, "the send outside the transaction")
			require.Equal(t, codes.Unset, send.Status.Code)
			require.Equal(t, 1, jobs(id))
		}

		// A transaction begun with a context Enqueue is not given: the
		// hook cannot tie the send to it, and the span ends with Enqueue,
		// unmarked (the README's Tracing section says so).
		tel.spans.Reset()
		tx, err := app.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		enqueue(t.Context(), tx)
		require.Len(t, spansOf(tel.spans, sendSpan), 1, "ended with Enqueue")
		require.NoError(t, tx.Rollback())
		require.Equal(t, codes.Unset, spansOf(tel.spans, sendSpan)[0].Status.Code)
	})
}
