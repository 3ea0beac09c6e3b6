package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/signal"
)

// Notify tells the workers of the table queue named queue, in every
// process whose client listens (Config.Listener), that rows may be
// waiting in it, so that they look at once instead of at their next poll.
// Call it through the transaction that inserted or changed the rows: on
// PostgreSQL it runs SELECT pg_notify(…) there, and the server delivers
// the notification when that transaction commits, never if it rolls
// back; through a *bun.DB, at once. Several calls for one queue in one
// transaction are delivered once.
//
// The jobs table needs no such call: Enqueue and EnqueueMany notify by
// themselves (see Config.NoEnqueueNotify). The workers of this process
// are woken by the QueryHook, or by the notification if this client
// listens. queue need not be a queue of this client: other processes may
// run it. On MySQL, MariaDB and SQLite, which have no notifications,
// Notify does nothing and returns nil, so that an app may call it
// whatever its server: workers in other processes find the rows when
// they poll.
func (c *Client) Notify(ctx context.Context, db bun.IDB, queue string) error {
	if db == nil {
		return errors.New("bunqueue: Notify: db must not be nil")
	}
	if err := checkText("queue", queue); err != nil || queue == "" {
		if err == nil {
			err = errors.New("queue must not be empty")
		}
		return fmt.Errorf("bunqueue: Notify: %w", err)
	}
	if !c.notifies() {
		return nil
	}
	if err := c.sig.Send(ctx, db, signal.Message{Kind: signal.KindRows, Queue: queue}); err != nil {
		return fmt.Errorf("bunqueue: Notify %s: %w", queue, err)
	}
	return nil
}

// notifyEnqueued sends a signal for each jobs queue into which jobs has
// a job due now (a job scheduled later is found by polling when it is
// due), unless none was inserted (skipped), enqueue notifications are
// off or the server has none:
//   - through a *bun.DB, whose insert has committed, from the pool in the
//     background (signal.Signals.SendLater): Enqueue does not wait for it;
//   - through a transaction that the QueryHook follows (the ctx of
//     RunInTx on a hooked DB), from the pool once it has committed, and
//     not at all if it rolls back;
//   - through any other transaction, in it: SELECT pg_notify(…), which
//     the server delivers at its commit.
//
// The server serializes the commits of the transactions that notify,
// their WAL flush included (so that notifications are queued in commit
// order): the first two keep the app's own commits out of that line, the
// notification committing alone, without a WAL flush of its own.
func (c *Client) notifyEnqueued(ctx context.Context, db bun.IDB, jobs []EnqueueParams, skipped bool) error {
	if skipped || c.cfg.NoEnqueueNotify || !c.notifies() {
		return nil
	}
	var msgs []signal.Message
	now := time.Now()
	for _, p := range jobs {
		var o EnqueueOpts
		if p.Opts != nil {
			o = *p.Opts
		}
		if o.Delay > 0 || o.RunAt.After(now) {
			continue
		}
		m := signal.Message{Kind: signal.KindJobs, Queue: o.Queue}
		if m.Queue == "" {
			m.Queue = QueueDefault
		}
		if !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	if _, plain := db.(*bun.DB); plain {
		c.sig.SendLater(c.db, c.cfg.Logger, msgs)
		return nil
	}
	if holdSend(ctx, func(end sendEnd) {
		if !end.rolledBack { // a failed COMMIT may have committed
			c.sig.SendLater(c.db, c.cfg.Logger, msgs)
		}
	}) {
		return nil
	}
	if err := c.sig.Send(ctx, db, msgs...); err != nil {
		return fmt.Errorf("bunqueue: enqueue: notify the workers: %w", err)
	}
	return nil
}
