package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// This file puts River (github.com/riverqueue/river), a job queue for Go
// on PostgreSQL, beside bunqueue's jobs rows: a burn-down tuned as
// `river bench` tunes it, one with River's defaults, and the latency of
// jobs inserted at 300 a second. River and its pgx driver are this
// command's dependencies, never the library's. River gets a pgx pool of
// its own on the run's DSN, and its tables in a schema of its own,
// migrated by rivermigrate before each row and dropped after it.

// Names of River's rows, which bunqueue's rows compare themselves with.
const (
	riverBurnTuned    = "river-burn-tuned"
	riverBurnDefaults = "river-burn-defaults"
	riverLatencyName  = "river-latency"
)

// riverSchema is the PostgreSQL schema of River's tables, so that River
// touches no other table.
const riverSchema = "bench_river"

// riverJobTable is River's jobs table in riverSchema.
const riverJobTable = riverSchema + ".river_job"

// What `river bench` (cmd/river/riverbench) sets for throughput: the
// shortest time between two fetches of a queue and the time between its
// polls, against River's defaults of 100 ms and 1 s.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// riverInsertBatch is how many jobs one InsertMany call inserts, as in
// `river bench`.
const riverInsertBatch = 5000

// riverModule is River's module path, for its version in the notes.
const riverModule = "github.com/riverqueue/river"

// noRiver is the skip of River's rows: River runs on PostgreSQL only.
func noRiver(b *bench) string {
	if _, pg := b.sql.(postgresBench); pg {
		return ""
	}
	return "River runs on PostgreSQL only (its pgx driver): no River row on MySQL or MariaDB"
}

// riverBurnJob is the job of River's burn-downs: it does nothing.
type riverBurnJob struct {
	N int `json:"n"`
}

// Kind implements river.JobArgs.
func (riverBurnJob) Kind() string { return "bench_river_burn" }

// riverLatencyJob is the job of river-latency: the bunqueue latency
// scenario's job, which carries when it was enqueued.
type riverLatencyJob struct {
	latencyJob
}

// Kind implements river.JobArgs.
func (riverLatencyJob) Kind() string { return "bench_river_latency" }

// riverDB is River's pool on the run's DSN and its driver, with River's
// tables migrated in riverSchema.
type riverDB struct {
	pool   *pgxpool.Pool
	driver *riverpgxv5.Driver
}

// openRiver opens River's pool of poolSize connections, as the bunqueue
// rows have, on b.dsn (the DSN every scenario of the run uses), and
// migrates River's tables into a new riverSchema.
func (b *bench) openRiver(ctx context.Context) (*riverDB, error) {
	cfg, err := pgxpool.ParseConfig(b.dsn)
	if err != nil {
		return nil, fmt.Errorf("river: the DSN is not valid for pgxpool: %w", err)
	}
	cfg.MaxConns = poolSize
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("river: open its pool: %w", err)
	}
	r := &riverDB{pool: pool, driver: riverpgxv5.New(pool)}
	if err := r.migrate(ctx, b.log); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// migrate drops riverSchema, if a run that was killed left it, creates it
// anew and migrates River's tables into it.
func (r *riverDB) migrate(ctx context.Context, log *slog.Logger) error {
	for _, stmt := range []string{"DROP SCHEMA IF EXISTS " + riverSchema + " CASCADE", "CREATE SCHEMA " + riverSchema} {
		if _, err := r.pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("river: %s: %w", stmt, err)
		}
	}
	m, err := rivermigrate.New(r.driver, &rivermigrate.Config{Schema: riverSchema, Logger: log})
	if err != nil {
		return fmt.Errorf("river: make the migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river: migrate %s: %w", riverSchema, err)
	}
	return nil
}

// close drops riverSchema, whatever happened to the scenario's context,
// and closes the pool.
func (r *riverDB) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = r.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+riverSchema+" CASCADE")
	r.pool.Close()
}

// riverConfig returns the Config of a River client whose workers run the
// default queue, 16 of them, as the bunqueue rows have; tuned sets the
// fetch timings `river bench` sets, else they are River's defaults.
func (b *bench) riverConfig(w *river.Workers, tuned bool) *river.Config {
	cfg := &river.Config{
		Logger:  b.log,
		Schema:  riverSchema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: w,
	}
	if tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = riverFetchCooldown, riverFetchPollInterval
	}
	return cfg
}

// riverSettings describes River's client for the notes.
func riverSettings(tuned bool) string {
	timings := fmt.Sprintf("FetchCooldown %s and FetchPollInterval %s as `river bench` sets them", riverFetchCooldown, riverFetchPollInterval)
	if !tuned {
		timings = fmt.Sprintf("River's defaults (FetchCooldown %s, FetchPollInterval %s)", river.FetchCooldownDefault, river.FetchPollIntervalDefault)
	}
	return fmt.Sprintf("River %s, riverpgxv5 on a pgxpool of %d of its own, MaxWorkers %d on one queue, %s",
		riverVersion(), poolSize, workers, timings)
}

// riverVersion returns the version of River built into this binary.
func riverVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == riverModule {
				return m.Version
			}
		}
	}
	return "(version unknown)"
}

// riverBurn burns down --burn jobs with a River client of 16 workers,
// tuned as `river bench` tunes it or with River's defaults.
func (b *bench) riverBurn(ctx context.Context, tuned bool) (result, error) {
	r, err := b.openRiver(ctx)
	if err != nil {
		return result{}, err
	}
	defer r.close()
	// River's own tally: the conflict columns count bunqueue's engine, and
	// stay empty for River.
	runs := &tally{c: &conflicts{}}
	w := river.NewWorkers()
	if err := river.AddWorkerSafely(w, river.WorkFunc(func(_ context.Context, job *river.Job[riverBurnJob]) error {
		runs.ran(job.ID)
		return nil
	})); err != nil {
		return result{}, fmt.Errorf("river: add the worker: %w", err)
	}
	client, err := river.NewClient(r.driver, b.riverConfig(w, tuned))
	if err != nil {
		return result{}, fmt.Errorf("river: make the client: %w", err)
	}
	n := b.burnJobs
	if err := r.insertBurn(ctx, client, n); err != nil {
		return result{}, err
	}
	vacuum := "VACUUM ANALYZE " + riverJobTable
	if _, err := r.pool.Exec(ctx, vacuum); err != nil {
		return result{}, fmt.Errorf("river: %s: %w", vacuum, err)
	}
	st, err := b.burn(ctx, burnRun{jobs: n, start: client.Start, stop: client.Stop, ran: &runs.done, left: r.left, drop: r.pool.Reset})
	if err != nil {
		return result{}, fmt.Errorf("river: %w", err)
	}
	note := st.note(n, fmt.Sprintf("InsertMany, %d per call", riverInsertBatch)) + "; " + riverSettings(tuned) + "; " + vacuum + " before it"
	if k := runs.c.reruns.Load(); k > 0 {
		note += fmt.Sprintf("; %d jobs ran again", k)
	}
	return result{ItemsPerSec: st.rate(), RSSKiB: st.rssKiB, Note: note}, nil
}

// insertBurn inserts n burn-down jobs with InsertMany, riverInsertBatch
// per call, on 4 connections, as enqueueBacklog does for bunqueue.
func (r *riverDB) insertBurn(ctx context.Context, client *river.Client[pgx.Tx], n int) error {
	g := newGroup(ctx, 4)
	for from := 0; from < n; from += riverInsertBatch {
		params := make([]river.InsertManyParams, 0, riverInsertBatch)
		for i := from; i < min(from+riverInsertBatch, n); i++ {
			params = append(params, river.InsertManyParams{Args: riverBurnJob{N: i}})
		}
		g.Go(func(ctx context.Context) error {
			_, err := client.InsertMany(ctx, params)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("river: insert the burn-down's jobs: %w", err)
	}
	return nil
}

// left counts River's jobs not yet completed: River keeps a completed
// job's row, in state completed, until its retention period ends.
func (r *riverDB) left(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, "SELECT COUNT(*) FROM "+riverJobTable+
		" WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled')").Scan(&n)
	return n, err
}

// riverLatency is the latency scenario for River: jobs inserted at
// perSecond from one producer, one Insert each (River runs it in a
// transaction of its own), and run by a tuned client of 16 workers in
// this process, which records when each started against the time it
// carries.
func (b *bench) riverLatency(ctx context.Context, perSecond int) (result, error) {
	r, err := b.openRiver(ctx)
	if err != nil {
		return result{}, err
	}
	defer r.close()
	rec := startRecorder{runs: &tally{c: &conflicts{}}}
	w := river.NewWorkers()
	if err := river.AddWorkerSafely(w, river.WorkFunc(func(_ context.Context, job *river.Job[riverLatencyJob]) error {
		rec.record(job.ID, job.Args.latencyJob, time.Now())
		return nil
	})); err != nil {
		return result{}, fmt.Errorf("river: add the worker: %w", err)
	}
	client, err := river.NewClient(r.driver, b.riverConfig(w, true))
	if err != nil {
		return result{}, fmt.Errorf("river: make the client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return result{}, fmt.Errorf("river: start the client: %w", err)
	}
	p, err := b.produce(ctx, perSecond, true, func(ctx context.Context, job latencyJob) error {
		_, err := client.Insert(ctx, riverLatencyJob{job}, nil)
		return err
	})
	rec.waitStarted(p.enqueued, 2*time.Second) // the last jobs get up to 2 s to start
	rss := readRSS()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := client.Stop(stopCtx); err == nil && serr != nil {
		err = fmt.Errorf("river: stop the client: %w", serr)
	}
	if err != nil {
		return result{}, err
	}
	return riverLatencyResult(rec.measured(), p, rss)
}

// riverLatencyResult is river-latency's row, from the latencies of the
// jobs started of those p enqueued in the window.
func riverLatencyResult(lat []time.Duration, p production, rss int64) (result, error) {
	if p.inWindow < 2 {
		return result{}, errors.New("river: fewer than 2 jobs were inserted during the measured window")
	}
	note := fmt.Sprintf("%d inserted in the window (%.0f/s, one Insert each, which took p50 %.2f ms, p99 %.2f ms), %d started; %s",
		p.inWindow, float64(p.inWindow)/p.window.Seconds(), *percentile(p.enqueueTimes, 0.5), *percentile(p.enqueueTimes, 0.99),
		len(lat), riverSettings(true))
	return latencyResult(lat, p.inWindow, p.window, rss, note)
}

// riverLatencyScenario is river-latency's row, which goes right before
// bunqueue's latency row: both run before the jobs throughput rows.
func riverLatencyScenario() scenario {
	return scenario{name: riverLatencyName, desc: "River: enqueue→start, 300 inserts/s, 16 workers, tuned as `river bench`", concurrency: workers, noRatio: true,
		skip: noRiver,
		run:  func(ctx context.Context, b *bench) (result, error) { return b.riverLatency(ctx, 300) }}
}

// riverRow returns the row of the River scenario name that ran in the
// same pass as a row of delay (with --delay each pass has its own).
func riverRow(results []result, name, delay string) (result, bool) {
	for _, r := range results {
		if name != "" && r.Scenario == name && r.Delay == delay {
			return r, true
		}
	}
	return result{}, false
}

// compareWithRiver gives each row whose scenario compares itself with a
// River row (scenario.river) that ran in this run its comparison: a
// throughput row its ratio to River's rate, a latency row River's
// percentiles in its note. It runs once every row is in, so that it does
// not depend on their order.
func (b *bench) compareWithRiver(selected []scenario, rep *report) {
	versus := map[string]string{}
	for _, s := range selected {
		versus[s.name] = s.river
	}
	for i, r := range rep.Results {
		base, ok := riverRow(rep.Results, versus[r.Scenario], r.Delay)
		if !ok || r.Skipped || base.Skipped {
			continue
		}
		switch {
		case base.P50ms != nil:
			r.Note += fmt.Sprintf("; River in the same run (%s): p50 %.2f ms, p95 %.2f ms, p99 %.2f ms",
				base.Scenario, *base.P50ms, *base.P95ms, *base.P99ms)
		case base.ItemsPerSec > 0:
			ratio := r.ItemsPerSec / base.ItemsPerSec
			r.RatioToRiver = &ratio
		}
		rep.Results[i] = r
		b.results[r.Scenario] = r
	}
}
