package bunqueue

import (
	"context"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// heartbeat registers the client, then, every HeartbeatInterval until
// Stop, refreshes its row (adding it again if it is gone), adds what the
// client counted since the last beat to the fleet's history (nothing, and
// no statement, when it counted nothing), and every upkeepEvery beats
// takes its turn at the fleet's upkeep.
func (c *Client) heartbeat(ctx context.Context) {
	defer c.workers.Done()
	if !c.register(ctx) {
		return
	}
	for beat := 1; ; beat++ {
		t := time.NewTimer(backoff.Jitter(c.cfg.HeartbeatInterval, 0.1))
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		err := c.beat(ctx)
		c.flushHistory(ctx)
		if err == nil && beat%upkeepEvery == 0 {
			err = c.upkeep(ctx, beat/upkeepEvery)
		}
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "bunqueue: process heartbeat", "error", err)
		}
	}
}

// beat refreshes the client's row of the registry, or adds it again if
// another process deleted it.
func (c *Client) beat(ctx context.Context) error {
	sql, every := c.procSQL(), c.cfg.HeartbeatInterval
	found, err := sql.Beat(ctx, c.db, c.processID(), c.processQueues(), every)
	if err != nil || found {
		return err
	}
	c.procMu.Lock()
	row := c.proc
	c.procMu.Unlock()
	row.Queues = c.processQueues()
	return sql.Insert(ctx, c.db, row, every)
}
