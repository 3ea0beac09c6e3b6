package limit

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// Global is the GlobalLimit of one queue: n slots, rows of the slots
// table, and a worker runs only while it holds one, so that no more
// workers run the queue at once, across every process, than it has
// slots. A worker runs one item at a time (a batch's handlers one after
// the other; a batch handler is one call), so it takes one slot per
// transaction.
type Global struct {
	limit slotsql.Limit
	n     int
	sql   slotsql.SQL
	d     sqldialect.Dialect
	db    bun.IDB
}

// NewGlobal returns the slots of queue's GlobalLimit of n on db, or nil
// if n is zero: a queue without a limit runs no statement on the slots
// table.
func NewGlobal(d sqldialect.Dialect, t tables.Names, db bun.IDB, queue string, n int) *Global {
	if n == 0 {
		return nil
	}
	return &Global{limit: slotsql.Limit{Queue: queue, Kind: slotsql.Concurrency}, n: n, sql: slotsql.New(d, t), d: d, db: db}
}

// Ensure creates the queue's slots that do not exist yet, at Start.
func (s *Global) Ensure(ctx context.Context) error {
	if s == nil {
		return nil
	}
	return ensure(ctx, s.sql, s.d, s.db, s.limit, s.n, "GlobalLimit")
}

// Take locks a free slot in tx and returns it, or ErrLimited if there is
// none.
func (s *Global) Take(ctx context.Context, tx bun.IDB) (Held, error) {
	got, err := s.sql.Take(ctx, tx, s.limit, s.n, 1)
	switch {
	case err != nil:
		return Held{}, fmt.Errorf("bunqueue: queue %q: taking a slot of its GlobalLimit: %w", s.limit.Queue, err)
	case len(got) == 0:
		return Held{}, ErrLimited
	}
	return Held{Limit: s.limit, Slot: got[0]}, nil
}
