package bunqueue

import (
	"context"

	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/lease"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// runner is one queue as the client runs it: the queue as the engine
// runs it (internal/engine: its name, settings, wake-ups, pause gate and
// work), and what Start sets and checks. Start builds one per queue
// (Queue.runner, Client.jobRunners).
//
// Its work is one of three kinds: a table queue's (claim.Queue: its rows
// are claimed and processed in one transaction, lock mode), a jobs
// queue's in lock mode (the same, over the jobs table, wrapped in
// notingFates, which notes each failed job's fate for the worker's log
// line), or a jobs queue's in lease mode (lease.Runner: a short
// transaction leases the jobs, which run outside it).
type runner struct {
	engine.Queue

	table *schema.Table // nil for a jobs queue in lease mode
	// byPrimary, set by Start, tells the claims that the model's primary
	// key is the table's, so that claims may force the PRIMARY index.
	byPrimary *bool
	// checkQuery, if set, runs a claim that locks nothing, so that Start
	// fails on a query the server refuses (see Queue.checkQuery).
	checkQuery func(ctx context.Context) error
	// slots are the queue's GlobalLimit, nil without one (limit.go);
	// keys its KeyLimit (keylimit.go).
	slots *limit.Global
	keys  *claim.KeyLimit
	// rate is the queue's RateLimit, nil without one; keyRate its KeyRate
	// (ratelimit.go).
	rate    *limit.Rate
	keyRate *claim.KeyLimit
	// limits are the queue's limits as configured, for Stats.
	limits queueLimits
	// jobs: a queue of the jobs table (see Client.handOver).
	jobs bool
}

var (
	_ engine.Work = (*claim.Queue[jobRow])(nil)
	_ engine.Work = (*lease.Runner)(nil)
)

// perKey is the number of slots per key of k, a KeyLimit, for the feed;
// 0 for none.
func perKey(k *claim.KeyLimit) int {
	if k == nil || k.Kind != slotsql.Concurrency {
		return 0
	}
	return k.N
}
