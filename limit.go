package bunqueue

import (
	"github.com/bunqueue/bunqueue/internal/limit"
)

// A queue's GlobalLimit is kept with slots, rows of the bunqueue_slots
// table (Migrate creates it): a worker runs only while it holds one, so
// that no more workers run the queue at once, across every process, than
// it has slots (internal/limit keeps them). A process runs at most
// GlobalLimit workers of the queue.

// newSlots returns the slots of queue's limit of n, or nil if n is zero:
// a queue without a limit runs no statement on the slots table.
func (c *Client) newSlots(queue string, n int) *limit.Global {
	return limit.NewGlobal(c.dialect, c.tables, c.db, queue, n)
}

// limitedWorkers is how many workers of a queue a process runs: no more
// than its GlobalLimit, if it has one, could run at once.
func limitedWorkers(workers, limit int) int {
	if limit > 0 {
		return min(workers, limit)
	}
	return workers
}
