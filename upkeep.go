package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/histsql"
)

// rollEvery is how many of its upkeep turns the lease's holder lets pass
// between roll-ups of the history: every five minutes at the default
// interval, so that minute rows stay at most an hour and five minutes.
const rollEvery = 5

// upkeepLease is how long the upkeep's lease lasts after each claim: two
// and a half upkeep turns, so that a late turn does not lose it and a
// holder that stopped without Stop hands it on within that time.
func (c *Client) upkeepLease() time.Duration {
	return upkeepEvery * c.cfg.HeartbeatInterval * 5 / 2
}

// upkeep is the client's turn at the fleet's upkeep: it claims or renews
// the lease, and, holding it, deletes the forgotten processes, samples
// the depth of its queues into the history and, every rollEvery turns,
// rolls the history up. Without the history's tables it only deletes
// the forgotten processes, as every process then does.
func (c *Client) upkeep(ctx context.Context, turn int) error {
	if c.histOff.Load() {
		return c.procSQL().Forget(ctx, c.db)
	}
	held, err := c.histSQL().Claim(ctx, c.db, histsql.UpkeepLease, c.processID(), c.upkeepLease())
	if err != nil && c.dialect.MissingTable(err) {
		c.historyOff(ctx)
		return c.procSQL().Forget(ctx, c.db)
	}
	if err != nil || !held {
		return err
	}
	if err := c.procSQL().Forget(ctx, c.db); err != nil {
		return err
	}
	if err := c.sampleDepths(ctx); err != nil {
		return err
	}
	if turn%rollEvery == 0 {
		return c.rollHistory(ctx)
	}
	return nil
}

// sampleDepths counts the depth of each of the client's queues, as Stats
// does, and writes them into the current minute's rows of the history. A
// queue whose depth could not be counted is left out, and its error
// returned.
func (c *Client) sampleDepths(ctx context.Context) error {
	depths := map[string]int{}
	var errs []error
	for _, s := range c.statsSources() {
		n, err := s.depth(ctx, QueueDepthLimit)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		depths[s.stats.Name] = n
	}
	if err := c.histSQL().Depth(ctx, c.db, depths); err != nil {
		errs = append(errs, fmt.Errorf("bunqueue: write the sampled depths: %w", err))
	}
	return errors.Join(errs...)
}

// rollHistory moves the minute rows older than the hour that
// FleetHistory shows by minute into their quarter-hour rows, in one
// transaction, and deletes the quarter-hour rows older than the day.
func (c *Client) rollHistory(ctx context.Context) error {
	h := c.histSQL()
	now, err := h.Now(ctx, c.db)
	if err != nil {
		return fmt.Errorf("bunqueue: roll the history up: %w", err)
	}
	minutes, quarters := historyFrom(now)
	err = c.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return h.Roll(ctx, tx, minutes) })
	if err == nil {
		err = h.Purge(ctx, c.db, quarters)
	}
	if err != nil {
		return fmt.Errorf("bunqueue: roll the history up: %w", err)
	}
	return nil
}

// historyFrom returns the starts, in Unix seconds, of the first minute
// and the first quarter hour that FleetHistory shows at now (Unix
// seconds): FleetHistoryMinutes minutes and FleetHistoryQuarters quarter
// hours up to and including now's.
func historyFrom(now int64) (minutes, quarters int64) {
	minutes = now - now%histsql.Minute - (FleetHistoryMinutes-1)*histsql.Minute
	quarters = now - now%histsql.Quarter - (FleetHistoryQuarters-1)*histsql.Quarter
	return minutes, quarters
}
