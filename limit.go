package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// A queue's GlobalLimit is kept with slots, rows of the bunqueue_slots
// table (Migrate creates it): a worker runs only while it holds one, so
// that no more workers run the queue at once, across every process, than
// it has slots. A worker takes its slot with SKIP LOCKED, never waiting
// for one that another holds, so that the limit adds no lock waits and no
// deadlocks; a worker that finds none free waits a little and looks
// again (slotWait). In lock mode the claim transaction locks the slot's
// row, and its end frees it, whether it commits, rolls back or dies with
// its process; in lease mode the slot is leased with the jobs, extended
// with them, and freed when the batch ends or the lease runs out.
//
// A worker runs one item at a time (a batch's handlers one after the
// other; a batch handler is one call), so it takes one slot per
// transaction, and a process runs at most GlobalLimit workers of the
// queue.

// errLimited is the outcome of a batch that found every slot of its
// queue's GlobalLimit held: nothing was claimed, and the worker waits
// before it tries again. It is not a failure.
var errLimited = errors.New("bunqueue: every slot of the queue's GlobalLimit is held")

// slotWait is about how long a worker that found no free slot waits
// before it looks again.
const slotWait = 25 * time.Millisecond

// slots is the global concurrency limit of one queue.
type slots struct {
	limit slotsql.Limit
	n     int
	sql   slotsql.SQL
}

// newSlots returns the slots of queue's limit of n, or nil if n is zero:
// a queue without a limit runs no statement on the slots table.
func (c *Client) newSlots(queue string, n int) *slots {
	if n == 0 {
		return nil
	}
	return &slots{limit: slotsql.Limit{Queue: queue, Kind: slotsql.Concurrency}, n: n, sql: slotsql.New(c.dialect)}
}

// ensure creates the queue's slots that do not exist yet, at Start.
func (s *slots) ensure(ctx context.Context, c *Client) error {
	if s == nil {
		return nil
	}
	if err := s.sql.Ensure(ctx, c.db, s.limit, s.n); err != nil {
		if c.dialect.MissingTable(err) {
			return fmt.Errorf("bunqueue: queue %q: its GlobalLimit needs the %s table of schema version 6: run bunqueue.Migrate (or apply bunqueue.MigrationSQL): %w",
				s.limit.Queue, slotsql.Slots, err)
		}
		return fmt.Errorf("bunqueue: queue %q: creating the slots of its GlobalLimit: %w", s.limit.Queue, err)
	}
	return nil
}

// take locks a free slot in tx and returns it, or errLimited if there is
// none.
func (s *slots) take(ctx context.Context, tx bun.IDB) (int, error) {
	got, err := s.sql.Take(ctx, tx, s.limit, s.n, 1)
	switch {
	case err != nil:
		return -1, fmt.Errorf("bunqueue: queue %q: taking a slot of its GlobalLimit: %w", s.limit.Queue, err)
	case len(got) == 0:
		return -1, errLimited
	}
	return got[0], nil
}

// limitedWorkers is how many workers of a queue a process runs: no more
// than its GlobalLimit, if it has one, could run at once.
func limitedWorkers(workers, limit int) int {
	if limit > 0 {
		return min(workers, limit)
	}
	return workers
}

// awaitSlot waits, after a batch that found no free slot, before the
// worker looks again; it reports whether the client did not stop
// meanwhile.
func (w *worker) awaitSlot() bool {
	return w.pause(min(backoff.Jitter(slotWait, 0.5), w.r.poll))
}
