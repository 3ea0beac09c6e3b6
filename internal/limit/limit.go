// Package limit keeps the limits of queues across processes: a queue's
// GlobalLimit and KeyLimit as slots that a worker holds while its items
// run, its RateLimit and KeyRate as slots that each start holds for a
// period. It takes, holds, extends and frees the slots, counts the rate
// slots a batch took (its tokens), says how long a worker waits until a
// slot or a window opens, and remembers which keys' slots exist and which
// keys it found full.
//
// It calls internal/slotsql for every statement on the slots table, and
// internal/sqldialect and internal/backoff; nothing here imports the root
// package.
//
// A worker takes its slots with SKIP LOCKED, never waiting for one that
// another holds, so that the limits add no lock waits and no deadlocks; a
// worker that finds none free waits (Wait) and looks again. In lock mode
// the claim transaction locks a GlobalLimit's or KeyLimit's slot, and its
// end frees it, whether it commits, rolls back or dies with its process;
// in lease mode the slots are leased with the jobs, extended with them,
// and freed when the batch ends or the lease runs out.
package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// ErrLimited is the outcome of a batch that found every slot of its
// queue's GlobalLimit held (or, as a *RateWait, none of its RateLimit
// free): nothing was claimed, and the worker waits before it tries
// again. It is not a failure.
var ErrLimited = errors.New("bunqueue: every slot of the queue's GlobalLimit is held")

// slotWait is about how long a worker that found no free slot of a
// GlobalLimit waits before it looks again.
const slotWait = 25 * time.Millisecond

// freeTimeout bounds the statements that give slots back: they run even
// when the batch's context was cancelled.
const freeTimeout = 30 * time.Second

// Wait is how long a worker waits, after a batch that ended with err (an
// ErrLimited), before it looks again: until the first slot of a
// RateLimit is free again, or about slotWait for a GlobalLimit; never
// longer than poll, the queue's poll interval.
func Wait(err error, poll time.Duration) time.Duration {
	var rw *RateWait
	if errors.As(err, &rw) {
		return min(rw.Wait+backoff.Jitter(time.Millisecond, 0.5), poll)
	}
	return min(backoff.Jitter(slotWait, 0.5), poll)
}

// ensure creates the slots of l that do not exist yet, at Start; what
// names the limit in its errors ("GlobalLimit", "RateLimit").
func ensure(ctx context.Context, sql slotsql.SQL, d sqldialect.Dialect, db bun.IDB, l slotsql.Limit, n int, what string) error {
	if err := sql.Ensure(ctx, db, l, n); err != nil {
		if d.MissingTable(err) {
			return fmt.Errorf("bunqueue: queue %q: its %s needs the %s table of schema version 6: run bunqueue.Migrate (or apply bunqueue.MigrationSQL): %w",
				l.Queue, what, sql.Table(), err)
		}
		return fmt.Errorf("bunqueue: queue %q: creating the slots of its %s: %w", l.Queue, what, err)
	}
	return nil
}

// NewToken returns a fresh random token that names who holds slots: a
// batch's rate slots, or a lease-mode batch's leases (its jobs' and the
// slots leased with them).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
