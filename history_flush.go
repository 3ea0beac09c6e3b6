package bunqueue

import (
	"context"

	"github.com/bunqueue/bunqueue/internal/histsql"
)

func (c *Client) histSQL() histsql.SQL { return histsql.New(c.dialect, c.tables) }

// flushHistory adds what the client counted since its last flush to the
// current minute's rows of the fleet's history, one statement for all its
// queues, and none when it counted nothing. Counts it could not write
// wait for the next flush; a missing history table turns the history
// off, with a line in the log.
func (c *Client) flushHistory(ctx context.Context) {
	counts := c.counts.pending.Take()
	if len(counts) == 0 || c.histOff.Load() {
		return
	}
	err := c.histSQL().Add(ctx, c.db, counts)
	switch {
	case err == nil:
	case c.dialect.MissingTable(err):
		c.historyOff(ctx)
	default:
		c.counts.pending.Return(counts)
		if ctx.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "bunqueue: add to the fleet's history (the next heartbeat retries)", "error", err)
		}
	}
}

// historyOff turns the fleet's history off for a client whose tables
// predate schema version 12, saying so once.
func (c *Client) historyOff(ctx context.Context) {
	if !c.histOff.Swap(true) {
		c.cfg.Logger.InfoContext(ctx, "bunqueue: this client adds nothing to the fleet's history: the "+c.histSQL().Table()+
			" table is missing (run "+c.migrateHint()+", then start the client again)")
	}
}
