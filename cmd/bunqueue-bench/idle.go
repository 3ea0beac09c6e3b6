package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// idleWindow is the least time the idle scenario watches: two of the
// default heartbeat's intervals, whatever --duration says.
const idleWindow = 2 * bunqueue.HeartbeatIntervalDefault

// statementCount counts the statements a pool runs through bun, and
// among them the process registry's (its table named in the statement).
type statementCount struct {
	registry string
	all, reg atomic.Int64
}

func (s *statementCount) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (s *statementCount) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	s.all.Add(1)
	if strings.Contains(e.Query, s.registry) {
		s.reg.Add(1)
	}
}

// idle measures what a client whose queues have no work costs the
// database: two table queues and two jobs queues, every setting at its
// default, no row or job due. The figure is statements a second, counted
// as bun runs them on the client's pool (the idle watcher's probes, the
// registry's heartbeat, the cleaner), over at least idleWindow.
func (b *bench) idle(ctx context.Context) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	if _, err := b.createItems(ctx, db, 0); err != nil {
		return result{}, err
	}
	if err := bunqueue.Migrate(ctx, db); err != nil {
		return result{}, err
	}
	done := b.newTally() // the conflict columns: no handler should run
	count := &statementCount{registry: "bunqueue_processes"}
	hooked := db.WithQueryHook(count)
	cfg := b.config(bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"bench_idle_a": {}, "bench_idle_b": {}}})
	client, err := bunqueue.NewClient(hooked, cfg)
	if err != nil {
		return result{}, err
	}
	for _, name := range []string{"bench_idle_t1", "bench_idle_t2"} {
		if err := client.Add(bunqueue.NewQueue(name, b.itemsQuery, func(_ context.Context, _ bun.Tx, it *benchItem) error { done.ran(it.ID); return nil }, nil)); err != nil {
			return result{}, err
		}
	}
	if err := bunqueue.AddWorker(client, bunqueue.WorkerFunc[idleArgs](func(_ context.Context, _ bun.IDB, job *bunqueue.Job[idleArgs]) error {
		done.ran(job.ID)
		return nil
	})); err != nil {
		return result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	time.Sleep(2 * time.Second) // Start's checks and first reads
	all0, reg0, began := count.all.Load(), count.reg.Load(), time.Now()
	window := max(b.duration, idleWindow)
	select {
	case <-ctx.Done():
	case <-time.After(window):
	}
	secs := time.Since(began).Seconds()
	all, reg := float64(count.all.Load()-all0)/secs, float64(count.reg.Load()-reg0)/secs
	rss := readRSS()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return result{}, err
	}
	note := fmt.Sprintf("statements/s of an idle client (2 table queues, 2 jobs queues, defaults) over %.0f s: %.2f, of which the process registry's heartbeat %.2f (one per %s)",
		secs, all, reg, bunqueue.HeartbeatIntervalDefault)
	return result{ItemsPerSec: all, RSSKiB: rss, Note: note}, nil
}

type idleArgs struct{}

func (idleArgs) Kind() string { return "bench_idle" }
