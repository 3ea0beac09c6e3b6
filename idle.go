package bunqueue

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/idle"
)

// newIdleWatch returns the client's idle watcher, which reads the pause
// flags of its queues (see pause.go) with its probes. Call it after the
// pauses are set.
func (c *Client) newIdleWatch() *idle.Watcher {
	cfg := idle.Config{DB: c.db, Logger: c.cfg.Logger, Contain: contain}
	if p := c.pauses.Load(); p != nil && p.on {
		cfg.Flags = p
	}
	return idle.New(cfg)
}

// watchIdle probes the client's idle queues until Stop.
func (c *Client) watchIdle(ctx context.Context) {
	defer c.workers.Done()
	c.idle.Run(ctx, c.stopping)
}

// probe returns the queue's read of its waiting rows on db as a
// scalar subquery for the idle watcher's probe: 1 if it finds a row that
// is neither cooling down nor one of except, NULL if not.
func (q *Queue[T]) probe(db bun.IDB, except []engine.Key) *bun.SelectQuery {
	sel := q.waiting(db, (*T)(nil)).ColumnExpr("1").Limit(1)
	if len(except) > 0 {
		sel = q.exceptKeys(sel, except)
	}
	return sel
}
