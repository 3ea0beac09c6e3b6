package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// This file runs the burn-downs: N jobs inserted first (not timed), then a
// client started and timed until the database holds none of them waiting
// or running. It is the shape of `river bench -n N`, so that bunqueue's
// jobs queue and River (river.go) are measured alike, in one group between
// two measurements of the commit ceiling.

// Sizes of the burn-downs (--burn).
const (
	burnFull  = 30_000
	burnQuick = 10_000
)

// Names of the burn-down group's rows: the commit ceiling right before
// and right after it.
const (
	ceilingBeforeBurn = "ceiling-16-before-burn"
	ceilingAfterBurn  = "ceiling-16-after-burn"
)

// burnPoll is how often a burn-down looks whether it is over: first at
// its handlers' count, then, once that reached N, at the database.
const burnPoll = 2 * time.Millisecond

// burnScenarios returns the burn-down group, in its run order: the
// ceiling, River's two burn-downs, bunqueue's three, the ceiling again.
func burnScenarios() []scenario {
	// Every burn-down needs the ceilings around the group.
	needs := func(more ...string) []string { return append(more, ceilingBeforeBurn, ceilingAfterBurn) }
	return []scenario{
		{name: ceilingBeforeBurn, desc: "the 16-connection commit ceiling again, right before the burn-downs", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.groupCeiling(ctx, false) }},
		{name: riverBurnTuned, desc: "River: burn-down of --burn jobs, 16 workers, fetch timings as `river bench` sets them", concurrency: workers,
			needs: needs(), skip: noRiver,
			run: func(ctx context.Context, b *bench) (result, error) { return b.riverBurn(ctx, true) }},
		{name: riverBurnDefaults, desc: "River: the same with River's defaults but MaxWorkers 16", concurrency: workers,
			needs: needs(), skip: noRiver,
			run: func(ctx context.Context, b *bench) (result, error) { return b.riverBurn(ctx, false) }},
		{name: "jobs-burn-16", desc: "jobs table, lock mode: burn-down of --burn jobs, 16 workers, self-sized batches", concurrency: workers,
			needs: needs(), river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.jobsBurn(ctx, "bench_burn_16", bunqueue.JobQueueConfig{Workers: workers})
			}},
		{name: "jobs-burn-defaults", desc: "jobs table: burn-down of --burn jobs, zero JobQueueConfig (4 workers)", concurrency: bunqueue.WorkersDefault, ratioTo: workers,
			needs: needs(riverBurnDefaults), river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.jobsBurn(ctx, "bench_burn_defaults", bunqueue.JobQueueConfig{})
			}},
		{name: "jobs-burn-lease-16", desc: "jobs table, lease mode: burn-down of --burn jobs, 16 workers, self-sized batches", concurrency: workers,
			needs: needs(), river: riverBurnTuned,
			run: func(ctx context.Context, b *bench) (result, error) {
				return b.jobsBurn(ctx, "bench_burn_lease_16", bunqueue.JobQueueConfig{Workers: workers, Mode: bunqueue.ModeLease})
			}},
		{name: ceilingAfterBurn, desc: "the 16-connection commit ceiling again, right after the burn-downs", concurrency: workers, noRatio: true,
			run: func(ctx context.Context, b *bench) (result, error) { return b.groupCeiling(ctx, true) }},
	}
}

// groupCeiling measures the 16-connection commit ceiling before or after
// the burn-downs, so that the table shows how the machine's load moved
// over the group. It does not replace the ceiling that sizes backlogs.
func (b *bench) groupCeiling(ctx context.Context, after bool) (result, error) {
	r, err := b.commitCeiling(ctx, workers)
	if err != nil {
		return result{}, err
	}
	b.last.fill(&r)
	if !after {
		r.Note = "right before the burn-downs; " + r.Note
		return r, nil
	}
	r.Note = "right after the burn-downs; " + r.Note
	if before, ok := b.results[ceilingBeforeBurn]; ok && before.ItemsPerSec > 0 {
		r.Note += fmt.Sprintf("; before them %.0f/s, after %.0f/s (×%.2f)", before.ItemsPerSec, r.ItemsPerSec, r.ItemsPerSec/before.ItemsPerSec)
	}
	return r, nil
}

// burnRun is one burn-down: its jobs, already inserted, and its client.
type burnRun struct {
	jobs  int                             // the jobs inserted before it
	start func(ctx context.Context) error // starts the client
	stop  func(ctx context.Context) error // stops it
	ran   *atomic.Int64                   // jobs whose handler ran, each counted once
	// left counts, in the database, the run's jobs not yet completed
	// (waiting, running, or run but not yet committed as done).
	left func(ctx context.Context) (int64, error)
	// drop closes the idle connections of the client's pool: PostgreSQL
	// publishes an idle session's counts of transactions only when it
	// ends (or some ten seconds later), so the burn-down's count is read
	// once its sessions, and those that inserted its jobs, have ended.
	drop func()
}

// burnStats is what a burn-down took.
type burnStats struct {
	took      time.Duration // from Start until none was left, or until the limit
	completed int64         // jobs completed by then
	finished  bool          // all of them
	rssKiB    int64         // this process's RSS at the end
}

// rate is the jobs completed per second of the burn-down.
func (s burnStats) rate() float64 {
	if s.took <= 0 {
		return 0
	}
	return float64(s.completed) / s.took.Seconds()
}

// note says what the burn-down did: its size, how its jobs were
// inserted, and how long it took.
func (s burnStats) note(n int, inserted string) string {
	note := fmt.Sprintf("burn-down of %d jobs inserted first (%s, not timed): ", n, inserted)
	if s.finished {
		return note + fmt.Sprintf("all completed %.2f s after Start", s.took.Seconds())
	}
	return note + fmt.Sprintf("NOT burnt down: %d completed by the limit of %.0f s after Start (the rate is theirs)", s.completed, s.took.Seconds())
}

// burnLimit is the longest a burn-down runs: one that is not over by then
// (River's defaults fetch 16 jobs at most every 100 ms) reports the rate
// of the jobs it completed.
func (b *bench) burnLimit() time.Duration {
	return max(30*time.Second, 4*(b.warmup+b.duration))
}

// burn starts run's client, waits until none of its jobs is left, and
// stops the client. The time, the CPU and the round trips per job
// (b.last) go from Start until none was left; the transactions per job
// from before Start until the client stopped (stopping commits none).
func (b *bench) burn(ctx context.Context, run burnRun) (burnStats, error) {
	run.drop()
	a := meterSample{cpu: readCPU(), proxy: b.proxyStats(), tx: b.settledTx(ctx)}
	began := time.Now()
	if err := run.start(ctx); err != nil {
		return burnStats{}, fmt.Errorf("start the client: %w", err)
	}
	st, err := b.waitBurnt(ctx, run, began)
	z := meterSample{cpu: readCPU(), proxy: b.proxyStats()}
	st.rssKiB = readRSS()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := run.stop(stopCtx); err == nil && serr != nil {
		err = fmt.Errorf("stop the client: %w", serr)
	}
	run.drop()
	z.tx = b.settledTx(ctx)
	b.windowCosts(a, z, st.completed)
	return st, err
}

// proxyStats reads the forwarder's counts, if there is one.
func (b *bench) proxyStats() *proxyStats {
	if b.proxy == nil {
		return nil
	}
	ps, err := b.proxy.stats()
	if err != nil {
		b.warn("the forwarder's counts: %v", err)
		return nil
	}
	return &ps
}

// settledTx reads the server's count of transactions once it has
// settled: two reads 100 ms apart that agree (for at most 3 s), so that
// the sessions that just ended have published theirs. nil without a
// counter.
func (b *bench) settledTx(ctx context.Context) *txMark {
	if b.tx == nil {
		return nil
	}
	m := &txMark{done: make(chan struct{})}
	defer close(m.done)
	last, err := b.tx.read(ctx)
	for deadline := time.Now().Add(3 * time.Second); err == nil && time.Now().Before(deadline); {
		if err = sleep(ctx, 100*time.Millisecond); err != nil {
			break
		}
		var n int64
		if n, err = b.tx.read(ctx); err == nil && n == last {
			break
		}
		last = n
	}
	m.n, m.err = float64(last), err
	return m
}

// waitBurnt waits until the handlers ran for every job of run and the
// database holds none of them left, or until the limit.
func (b *bench) waitBurnt(ctx context.Context, run burnRun, began time.Time) (burnStats, error) {
	limit := began.Add(b.burnLimit())
	for {
		if run.ran.Load() >= int64(run.jobs) || time.Now().After(limit) {
			at := time.Now()
			left, err := run.left(ctx)
			if err != nil {
				return burnStats{}, fmt.Errorf("count the jobs left: %w", err)
			}
			if left == 0 || at.After(limit) {
				return burnStats{took: at.Sub(began), completed: int64(run.jobs) - left, finished: left == 0}, nil
			}
		}
		if err := sleep(ctx, burnPoll); err != nil {
			return burnStats{}, err
		}
	}
}

// jobsBurn burns down --burn jobs of the jobs table's queue named queue,
// run with cfg, with the bench's pool of 32 connections.
func (b *bench) jobsBurn(ctx context.Context, queue string, cfg bunqueue.JobQueueConfig) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	client, cleanup, err := b.jobsClient(ctx, db, queue, cfg)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	done := b.newTally()
	if err := bunqueue.AddWorker(client, countingWorker(done)); err != nil {
		return result{}, err
	}
	n := b.burnJobs
	if err := enqueueBacklog(ctx, client, db, queue, n); err != nil {
		return result{}, err
	}
	vacuum := b.sql.vacuum(jobsTable)
	if err := execAll(ctx, db, vacuum...); err != nil {
		return result{}, err
	}
	st, err := b.burn(ctx, burnRun{jobs: n, start: client.Start, stop: client.Stop, ran: &done.done,
		left: func(ctx context.Context) (int64, error) { return queueLeft(ctx, db, queue) },
		drop: func() { dropIdle(db) }})
	if err != nil {
		return result{}, err
	}
	note := st.note(n, "EnqueueMany, 5000 per call") + burnSettings(cfg)
	if len(vacuum) > 0 {
		note += "; " + vacuum[0] + " before it"
	}
	if cfg.Workers == 0 {
		note += b.versus(st.rate(), "of", "defaults against defaults", riverBurnDefaults)
	}
	return result{ItemsPerSec: st.rate(), RSSKiB: st.rssKiB, Note: note}, nil
}

// dropIdle closes db's idle connections and lets it keep them again.
func dropIdle(db *bun.DB) {
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(poolSize)
}

// burnSettings describes a burn-down's JobQueueConfig, which sets at
// most Workers and Mode.
func burnSettings(cfg bunqueue.JobQueueConfig) string {
	if cfg.Workers == 0 {
		return fmt.Sprintf("; zero JobQueueConfig: %d workers, self-sized batches, lock mode", bunqueue.WorkersDefault)
	}
	mode := "lock"
	if cfg.Mode == bunqueue.ModeLease {
		mode = "lease"
	}
	return fmt.Sprintf("; %d workers, self-sized batches, %s mode", cfg.Workers, mode)
}

// queueLeft counts the jobs of queue still in the jobs table: with
// Config.Retention zero a job's row goes when it completes.
func queueLeft(ctx context.Context, db bun.IDB, queue string) (int64, error) {
	var n int64
	err := db.NewRaw("SELECT COUNT(*) FROM ? WHERE queue = ?", bun.Ident(jobsTable), queue).Scan(ctx, &n)
	return n, err
}
