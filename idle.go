package bunqueue

import (
	"context"

	"github.com/bunqueue/bunqueue/internal/idle"
)

// newIdleWatch returns the client's idle watcher, which reads the pause
// flags of its queues (see pause.go) with its probes. Call it after the
// pauses are set.
func (c *Client) newIdleWatch() *idle.Watcher {
	cfg := idle.Config{DB: c.db, Logger: c.cfg.Logger, Contain: contain}
	if p := c.pauses.Load(); p != nil && p.On() {
		cfg.Flags = p
	}
	return idle.New(cfg)
}

// watchIdle probes the client's idle queues until Stop.
func (c *Client) watchIdle(ctx context.Context) {
	defer c.workers.Done()
	c.idle.Run(ctx, c.stopping)
}
