package bunqueue

import (
	"context"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/uptrace/bun"
)

// clean deletes completed jobs older than Config.Retention, in batches by
// primary key, until Stop.
func (c *Client) clean(ctx context.Context) {
	defer c.workers.Done()
	every := min(max(c.cfg.Retention/2, time.Second), time.Minute)
	log := c.cfg.Logger.With("queue", "jobs")
	for {
		t := time.NewTimer(backoff.Jitter(every, 0.1))
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		for {
			const batch = 1000
			n, err := c.purge(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					log.ErrorContext(ctx, "bunqueue: delete completed jobs", "error", err)
				}
				break
			}
			if n < batch {
				break
			}
		}
	}
}

// purge deletes, in a transaction, up to limit of the completed jobs
// older than Config.Retention, and returns how many were due.
func (c *Client) purge(ctx context.Context, limit int) (n int, err error) {
	err = c.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) (err error) {
		n, err = c.finisher().Purge(ctx, tx, c.cfg.Retention, limit)
		return err
	})
	return n, err
}
