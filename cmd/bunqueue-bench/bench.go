package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// benchLock is the server's named lock a bench run holds, so that two runs
// against one database do not drop each other's tables.
const benchLock = "bunqueue_bench"

// benchLockWait is how long a bench run waits for benchLock (a variable
// for the tests).
var benchLockWait = 10 * time.Second

// bench is one run of the bench command: its settings and what it
// measured so far.
type bench struct {
	dsn      string
	sql      benchSQL           // what differs between servers, from the DSN
	dialect  sqldialect.Dialect // the engine's SQL for the server
	duration time.Duration      // the measured window of each scenario
	warmup   time.Duration      // run before the window, not measured
	log      *slog.Logger       // the clients' logger: warnings and errors to stderr
	// noPrepared runs the clients with Config.NoPreparedStatements, to
	// compare.
	noPrepared bool
	progress   io.Writer

	large int // rows of the large-backlog scenarios (backlog-1m, memory-1m)
	burst int // rows of the post-burst scenarios' bursts
	// burnJobs is the jobs of each burn-down (burn.go).
	burnJobs int

	ceiling map[int]float64   // commit ceiling by concurrency, once measured
	results map[string]result // the scenarios run so far, by name

	// last is what an item cost in the last window measured: the
	// scenario's, once its ceiling has run.
	last costs
	// tx counts the server's transactions, if it can (tx/item); nil in
	// the child processes and with noTx (--no-tx).
	tx   *txCounter
	noTx bool

	// delays are the --delay values: each is a pass over the scenarios
	// through a forwarder (empty: one pass, straight to the server).
	delays []time.Duration
	// proxy is the forwarder of the pass being run, if any, and delay its
	// delay as the rows show it; dsn then connects through it.
	proxy *proxyProc
	delay string

	// scene counts the lock conflicts of the scenario being run.
	scene *conflicts
	// fleetRate is the enqueues per second of each producer of the fleet
	// scenarios; fleetBacklog, if positive, the jobs or rows they start
	// with (else sized from the ceiling).
	fleetRate    int
	fleetBacklog int
}

// result is one row of the output table.
type result struct {
	Scenario    string   `json:"scenario"`
	Concurrency int      `json:"concurrency"`
	ItemsPerSec float64  `json:"items_per_sec"`
	Ratio       *float64 `json:"ratio_to_ceiling,omitempty"`
	// Ceiling is the commit ceiling at the scenario's concurrency,
	// measured again right before it: the ratio's denominator.
	Ceiling *float64 `json:"ceiling_per_sec,omitempty"`
	P50ms   *float64 `json:"p50_ms,omitempty"`
	P95ms   *float64 `json:"p95_ms,omitempty"`
	P99ms   *float64 `json:"p99_ms,omitempty"`
	RSSKiB  int64    `json:"rss_kib"`
	// Delay is the forwarder's delay each way, with --delay ("0s",
	// "250µs"); empty when the bench connected straight to the server.
	Delay string `json:"delay,omitempty"`
	// ClientCPU and ServerCPU are the CPU time, in microseconds per
	// item, that the measured window cost this process and (when it runs
	// on this machine) the database server; ProxyCPU, with --delay, the
	// forwarder's process.
	ClientCPU *float64 `json:"client_cpu_us_per_item,omitempty"`
	ServerCPU *float64 `json:"server_cpu_us_per_item,omitempty"`
	ProxyCPU  *float64 `json:"proxy_cpu_us_per_item,omitempty"`
	// TxPerItem is the transactions the server ended (committed or rolled
	// back) in the measured window per item, as its counters tell
	// (docs/bench.md); RoundTrips, with --delay, the round trips on the
	// wire per item, as the forwarder counts them.
	TxPerItem  *float64 `json:"tx_per_item,omitempty"`
	RoundTrips *float64 `json:"round_trips_per_item,omitempty"`
	// TxRetries is the transactions the scenario's clients ran again after
	// a deadlock or a lock wait timeout (bunqueue.transaction.retries),
	// FailedBatches the batches that failed all the same ("bunqueue: batch
	// failed"), Handled the items whose handler ran, and Reruns the runs of
	// a handler for an item that had already run (RerunShare: Reruns ÷
	// Handled), all over the whole scenario: warm-up, bursts and drains
	// too. Nil for the plain-SQL scenarios, which run no handler.
	TxRetries     *int64   `json:"tx_retries,omitempty"`
	FailedBatches *int64   `json:"failed_batches,omitempty"`
	Handled       *int64   `json:"handled,omitempty"`
	Reruns        *int64   `json:"handler_reruns,omitempty"`
	RerunShare    *float64 `json:"rerun_share,omitempty"`
	// RatioToRiver is items/s ÷ the items/s of river-burn-tuned in the
	// same run, for the bunqueue jobs rows (river.go).
	RatioToRiver *float64 `json:"ratio_to_river,omitempty"`
	// Skipped: the scenario cannot run against this server (the note
	// says why), and the row has no figures.
	Skipped bool   `json:"skipped,omitempty"`
	Note    string `json:"note,omitempty"`
}

// report is what --json prints.
type report struct {
	Server     string  `json:"server"`
	GoVersion  string  `json:"go_version"`
	NumCPU     int     `json:"num_cpu"`
	DurationS  float64 `json:"duration_s"`
	WarmupS    float64 `json:"warmup_s"`
	LargeRows  int     `json:"large_rows"`
	BurstRows  int     `json:"burst_rows"`
	BurnJobs   int     `json:"burn_jobs"`
	StartedUTC string  `json:"started_utc"`
	// TxCounted says what tx_per_item counts, or why no row has it.
	TxCounted string `json:"tx_counted"`
	// Proxy is, with --delay, each pass's forwarder: its delay and the
	// pings measured through it.
	Proxy   []proxyPass `json:"proxy,omitempty"`
	Results []result    `json:"results"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bunqueue-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "short run: 3 s per scenario and smaller bursts, about four minutes in all")
	dsnFlag := fs.String("dsn", "", dsnUsage)
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	duration := fs.Duration("duration", 0, "measured time of each scenario (default 3s with --quick, 15s without)")
	only := fs.String("only", "", "comma-separated scenario names or name prefixes to run (default all; a scenario's\n"+
		"baseline, such as the 16-connection ceiling, or table-b1 for backlog-1m, runs too): "+strings.Join(scenarioNames(), ", "))
	large := fs.Int("large", 0, fmt.Sprintf("waiting rows of the large-backlog scenarios backlog-1m and memory-1m (default %d)", largeFull))
	burst := fs.Int("burst", 0, fmt.Sprintf("rows processed by the post-burst scenarios before they measure (default %d, %d with --quick;\n"+
		"post-burst-held takes at most %d)", burstFull, burstQuick, heldBurstMax))
	burnJobs := fs.Int("burn", 0, fmt.Sprintf("jobs of each burn-down, River's and bunqueue's (default %d, %d with --quick)", burnFull, burnQuick))
	noPrepared := fs.Bool("no-prepared", false, "run bunqueue's clients with Config.NoPreparedStatements (every statement in text), to compare")
	fleetRate := fs.Int("fleet-rate", fleetRateDefault, "enqueues per second of each client's producer in the fleet-* scenarios")
	fleetBacklog := fs.Int("fleet-backlog", 0, "jobs or rows the fleet-* scenarios start with (default: sized from the ceiling, see docs/bench.md)")
	delays := fs.String("delay", "", "comma-separated `DELAYS` (0,250us,1ms): run every scenario once per delay, every connection through a\n"+
		"forwarder that adds that delay each way (0: the forwarder without delay), as for a server on another host;\n"+
		"the rows then give round trips per item too")
	noTx := fs.Bool("no-tx", false, "do not count the server's transactions (tx/item): on PostgreSQL that keeps each scenario's work\n"+
		"going a second after its window, on MySQL and MariaDB it turns InnoDB's trx counters on for the run")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile of the whole run to `FILE` (go tool pprof reads it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue-bench [--quick] [--dsn DSN] [--json] [--duration D] [--only NAMES] [--large N] [--burst N] [--burn N]\n"+
			"                      [--fleet-rate N] [--fleet-backlog N] [--no-prepared] [--delay DELAYS] [--no-tx]\n"+
			"                      [--cpuprofile FILE]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Measures, each for a fixed time, the database's commit ceiling and bunqueue's")
		fmt.Fprintln(stderr, "throughput and latency, in tables named bench_* and jobs queues named bench_*")
		fmt.Fprintln(stderr, "that it creates and removes. Each throughput is given as a ratio to the commit")
		fmt.Fprintln(stderr, "ceiling (BEGIN; UPDATE one row; COMMIT) at the same concurrency, measured again")
		fmt.Fprintln(stderr, "right before the scenario, since a shared machine's load drifts over a run.")
		fmt.Fprintln(stderr, "Each row that runs handlers also counts the transactions its clients retried")
		fmt.Fprintln(stderr, "after a deadlock or lock wait timeout, the batches that failed, and the runs of")
		fmt.Fprintln(stderr, "a handler for an item that had already run (re-runs). Each row with a window of")
		fmt.Fprintln(stderr, "its own gives the server's transactions per item. docs/bench.md has more.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	b := newBench(dsnFrom(*dsnFlag), stderr)
	b.duration = 15 * time.Second
	b.progress = stderr
	b.large = largeFull
	b.burst = burstFull
	b.burnJobs = burnFull
	if *quick {
		b.duration = 3 * time.Second
		b.burst = burstQuick
		b.burnJobs = burnQuick
	}
	if *burnJobs > 0 {
		b.burnJobs = *burnJobs
	}
	if *duration < 0 || *large < 0 || *burst < 0 || *burnJobs < 0 || *fleetBacklog < 0 {
		fmt.Fprintln(stderr, "bunqueue-bench: --duration, --large, --burst, --burn and --fleet-backlog must not be negative")
		return exitUsage
	}
	if *fleetRate <= 0 {
		fmt.Fprintln(stderr, "bunqueue-bench: --fleet-rate must be positive")
		return exitUsage
	}
	b.fleetRate, b.fleetBacklog = *fleetRate, *fleetBacklog
	if *large > 0 {
		b.large = *large
	}
	if *burst > 0 {
		b.burst = *burst
	}
	if *duration > 0 {
		b.duration = *duration
	}
	b.warmup = min(time.Second, b.duration/4)
	b.noPrepared, b.noTx = *noPrepared, *noTx
	selected, err := selectScenarios(*only)
	if err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench: %v\n", err)
		return exitUsage
	}
	if b.delays, err = parseDelays(*delays); err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench: %v\n", err)
		return exitUsage
	}
	if _, err := b.sql.serverAddr(b.dsn); len(b.delays) > 0 && err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench: --delay: %v\n", err)
		return exitUsage
	}

	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bunqueue-bench: --cpuprofile: %v\n", err)
			return exitError
		}
		defer stop()
	}
	rep, err := b.run(ctx, selected)
	if err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench: %v\n", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "bunqueue-bench: %v\n", err)
			return exitError
		}
		return exitOK
	}
	printTable(stdout, rep)
	return exitOK
}

// newBench returns a bench of the server dsn names, whose clients log
// their warnings and errors to stderr.
func newBench(dsn string, stderr io.Writer) *bench {
	server := benchSQLFor(dsn)
	return &bench{
		dsn:      dsn,
		sql:      server,
		dialect:  server.dialect(),
		log:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		progress: io.Discard,
		ceiling:  map[int]float64{},
		results:  map[string]result{},
		scene:    &conflicts{},

		fleetRate: fleetRateDefault,
	}
}

// config returns cfg with the bench's logger and settings, for a client:
// its logger and MeterProvider count the scenario's conflicts.
func (b *bench) config(cfg bunqueue.Config) *bunqueue.Config {
	cfg.Logger = b.scene.logger(b.log)
	cfg.MeterProvider = b.scene.meterProvider()
	cfg.NoPreparedStatements = b.noPrepared
	return &cfg
}

// selectScenarios returns the scenarios whose names start with one of the
// comma-separated prefixes in only, or all of them if only is empty.
func selectScenarios(only string) ([]scenario, error) {
	all := scenarios()
	if strings.TrimSpace(only) == "" {
		return all, nil
	}
	var out []scenario
	for _, p := range strings.Split(only, ",") {
		p = strings.TrimSpace(p)
		exact := slices.ContainsFunc(all, func(s scenario) bool { return s.name == p })
		found := false
		for _, s := range all {
			if s.name == p || !exact && strings.HasPrefix(s.name, p) {
				found = true
				if !slices.ContainsFunc(out, func(o scenario) bool { return o.name == s.name }) {
					out = append(out, s)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("--only: no scenario named %q (scenarios: %s)", p, strings.Join(scenarioNames(), ", "))
		}
	}
	// Add what the selected scenarios compare themselves with.
	for i := 0; i < len(out); i++ {
		for _, d := range out[i].deps() {
			j := slices.IndexFunc(all, func(s scenario) bool { return s.name == d })
			if j >= 0 && !slices.ContainsFunc(out, func(o scenario) bool { return o.name == d }) {
				out = append(out, all[j])
			}
		}
	}
	// Keep the run order, so that the ceiling comes first.
	slices.SortStableFunc(out, func(a, b scenario) int {
		return slices.IndexFunc(all, func(s scenario) bool { return s.name == a.name }) -
			slices.IndexFunc(all, func(s scenario) bool { return s.name == b.name })
	})
	return out, nil
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return names
}

// run checks the server, takes the bench lock and runs the scenarios:
// once, or once per --delay through a forwarder.
func (b *bench) run(ctx context.Context, selected []scenario) (*report, error) {
	admin, err := b.open(ctx, 4)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rep := &report{
		GoVersion:  runtime.Version(),
		NumCPU:     runtime.NumCPU(),
		DurationS:  b.duration.Seconds(),
		WarmupS:    b.warmup.Seconds(),
		LargeRows:  b.large,
		BurstRows:  b.burst,
		BurnJobs:   b.burnJobs,
		StartedUTC: time.Now().UTC().Format(time.RFC3339),
	}
	if err := admin.NewRaw(b.sql.version()).Scan(ctx, &rep.Server); err != nil {
		return nil, fmt.Errorf("read the server version: %w", err)
	}

	// The named lock belongs to one connection: hold that one for the run.
	lockConn, err := admin.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open a connection: %w", err)
	}
	defer lockConn.Close()
	unlock, err := b.dialect.Lock(ctx, lockConn, benchLock, benchLockWait)
	if err != nil {
		return nil, fmt.Errorf("%w: is another bunqueue-bench running against this database? wait for it to finish", err)
	}
	defer func() { _ = unlock() }()
	// After the lock: the counter may switch the server's counters on,
	// and off again at the end.
	defer b.countTx(ctx, rep)()

	passes := max(len(b.delays), 1)
	total := time.Duration(len(selected)*passes) * (b.duration + b.warmup + b.tail())
	fmt.Fprintf(b.progress, "bunqueue-bench: %d scenarios, %s measured each after %s of warm-up (about %s plus set-up, fills and bursts), server %s\n",
		len(selected)*passes, b.duration, b.warmup, total.Round(time.Second), rep.Server)
	if len(b.delays) == 0 {
		if err := b.runScenarios(ctx, rep, selected); err != nil {
			return rep, err
		}
	}
	for _, d := range b.delays {
		if err := b.runDelayed(ctx, rep, selected, d); err != nil {
			return nil, err
		}
	}
	b.compareWithRiver(selected, rep)
	return rep, nil
}

// countTx opens the run's transaction counter, unless --no-tx, and says
// in rep what it counts, or why nothing; the function it returns undoes
// what the counter changed on the server.
func (b *bench) countTx(ctx context.Context, rep *report) func() {
	if b.noTx {
		rep.TxCounted = "not counted: --no-tx"
		return func() {}
	}
	tx, err := b.openTxCounter(ctx)
	if err != nil {
		rep.TxCounted = "not counted: " + err.Error()
		b.warn("no tx/item: %v", err)
		return func() {}
	}
	b.tx, rep.TxCounted = tx, tx.what
	return func() {
		tx.close(context.WithoutCancel(ctx))
		b.tx = nil
	}
}

// tail is how long a window's work must go on after its end for the
// transaction count to be read (on PostgreSQL, see txCounter.spread).
func (b *bench) tail() time.Duration {
	if b.tx == nil {
		return 0
	}
	return b.tx.spread
}

// runScenarios runs the selected scenarios, each after the ceiling it is
// compared with, and adds their rows to rep.
func (b *bench) runScenarios(ctx context.Context, rep *report, selected []scenario) error {
	for _, s := range selected {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		r, err := b.runScenario(ctx, s)
		if err != nil {
			return err
		}
		r.Delay = b.delay
		b.results[s.name] = r
		rep.Results = append(rep.Results, r)
	}
	return nil
}

// runScenario runs s, after the ceiling it is compared with, and returns
// its row.
func (b *bench) runScenario(ctx context.Context, s scenario) (result, error) {
	fmt.Fprintf(b.progress, "  %-18s %s … ", s.name, s.desc)
	if s.skip != nil {
		if why := s.skip(b); why != "" {
			fmt.Fprintf(b.progress, "skipped: %s\n", why)
			return result{Scenario: s.name, Concurrency: s.concurrency, Skipped: true, Note: "skipped: " + why}, nil
		}
	}
	began := time.Now()
	var ceiling float64
	if !s.ceiling && !s.noRatio {
		// The machine's load drifts over a run: the ratio is to the
		// ceiling measured right before the scenario.
		c, err := b.adjacentCeiling(ctx, s.ratioConcurrency())
		if err != nil {
			fmt.Fprintln(b.progress, "failed")
			return result{}, fmt.Errorf("scenario %s: the ceiling before it: %w", s.name, err)
		}
		ceiling = c
	}
	b.last = costs{}
	b.scene = &conflicts{}
	r, err := s.run(ctx, b)
	if ferr := b.scene.fill(ctx, &r); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(b.progress, "failed")
		return result{}, fmt.Errorf("scenario %s: %w", s.name, err)
	}
	r.Scenario = s.name
	if r.ClientCPU == nil && !s.noRatio {
		b.last.fill(&r)
	}
	if r.Concurrency == 0 {
		r.Concurrency = s.concurrency
	}
	if s.ceiling {
		b.ceiling[s.concurrency] = r.ItemsPerSec
	}
	if ceiling > 0 {
		ratio := r.ItemsPerSec / ceiling
		r.Ratio, r.Ceiling = &ratio, &ceiling
	} else if s.ceiling {
		ratio := 1.0
		r.Ratio = &ratio
	}
	fmt.Fprintf(b.progress, "%.0f items/s%s%s (%s)\n", r.ItemsPerSec, costsProgress(r), conflictsProgress(r), time.Since(began).Round(100*time.Millisecond))
	return r, nil
}

// costsProgress is the progress line's account of r's transactions and
// round trips per item, where measured.
func costsProgress(r result) string {
	var s string
	if r.TxPerItem != nil {
		s += fmt.Sprintf(", %.2f tx/item", *r.TxPerItem)
	}
	if r.RoundTrips != nil {
		s += fmt.Sprintf(", %.2f round trips/item", *r.RoundTrips)
	}
	return s
}

// conflictsProgress is the progress line's account of r's conflicts, if
// it ran bunqueue clients.
func conflictsProgress(r result) string {
	if r.TxRetries == nil {
		return ""
	}
	return fmt.Sprintf(", %d tx retries, %d failed batches, %d re-runs", *r.TxRetries, *r.FailedBatches, *r.Reruns)
}

// adjacentCeiling measures the commit ceiling at concurrency n in a
// short window (a fifth of the scenarios', at least a second), without
// counting its transactions, which no row reports.
func (b *bench) adjacentCeiling(ctx context.Context, n int) (float64, error) {
	duration, warmup, tx := b.duration, b.warmup, b.tx
	defer func() { b.duration, b.warmup, b.tx = duration, warmup, tx }()
	b.tx = nil
	b.duration, b.warmup = max(duration/5, time.Second), min(warmup, 250*time.Millisecond)
	r, err := b.commitCeiling(ctx, n)
	return r.ItemsPerSec, err
}

// open returns a *bun.DB with a pool of at most maxConns connections, and
// checks that the server answers.
func (b *bench) open(ctx context.Context, maxConns int) (*bun.DB, error) {
	return b.openDSN(ctx, b.dsn, maxConns)
}

// openDSN is open for another DSN of the same server: straight to it, or
// through a forwarder.
func (b *bench) openDSN(ctx context.Context, dsn string, maxConns int) (*bun.DB, error) {
	sqldb, where, err := b.sql.open(dsn)
	if err != nil {
		return nil, err
	}
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(maxConns)
	// Ping before making bun's dialect, which may log its own complaint
	// when the server does not answer.
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := sqldb.PingContext(pingCtx); err != nil {
		_ = sqldb.Close()
		return nil, fmt.Errorf("cannot reach %s (set --dsn or BUNQUEUE_MYSQL_DSN): %w", where, err)
	}
	return bun.NewDB(sqldb, b.sql.bunDialect()), nil
}

// window is what measure saw.
type window struct {
	rate   float64 // items per second during the window
	end    int64   // the count at the end of the window
	rssKiB int64   // the process RSS at the end of the window
	conns  int     // the most connections in use at once, where sampled
	first  float64 // items per second in the window's first second, where measured
}

// measure waits for the warm-up, then counts what done gains during the
// measured window, and what its items cost (b.last); the work must go on
// until it returns, which is b.tail() after the window.
func (b *bench) measure(ctx context.Context, done *atomic.Int64) (window, error) {
	if err := sleep(ctx, b.warmup); err != nil {
		return window{}, err
	}
	c0, t0 := done.Load(), time.Now()
	m0 := b.sampleMeters(ctx)
	if err := sleep(ctx, b.duration); err != nil {
		return window{}, err
	}
	c1, t1 := done.Load(), time.Now()
	w := window{rate: float64(c1-c0) / t1.Sub(t0).Seconds(), end: c1, rssKiB: readRSS()}
	b.windowCosts(m0, b.sampleMeters(ctx), c1-c0)
	return w, nil
}

// measureNow measures like measure but without a warm-up, and also the
// rate of the first second.
func (b *bench) measureNow(ctx context.Context, done *atomic.Int64) (window, error) {
	c0, t0 := done.Load(), time.Now()
	m0 := b.sampleMeters(ctx)
	firstLen := min(time.Second, b.duration)
	if err := sleep(ctx, firstLen); err != nil {
		return window{}, err
	}
	c1, t1 := done.Load(), time.Now()
	if err := sleep(ctx, b.duration-firstLen); err != nil {
		return window{}, err
	}
	c2, t2 := done.Load(), time.Now()
	w := window{
		rate:   float64(c2-c0) / t2.Sub(t0).Seconds(),
		first:  float64(c1-c0) / t1.Sub(t0).Seconds(),
		end:    c2,
		rssKiB: readRSS(),
	}
	b.windowCosts(m0, b.sampleMeters(ctx), c2-c0)
	return w, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
}

// readRSS returns VmRSS from /proc/self/status in KiB, or 0 where there is
// none.
func readRSS() int64 { return readStatus("VmRSS:") }

// readPeakRSS returns VmHWM, the peak RSS of the process, from
// /proc/self/status in KiB, or 0 where there is none.
func readPeakRSS() int64 { return readStatus("VmHWM:") }

// readStatus returns the value in KiB of a field of /proc/self/status.
func readStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			fields := strings.Fields(rest) // "12345 kB"
			if len(fields) > 0 {
				n, _ := strconv.ParseInt(fields[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// printTable prints rep as a table, after its header: the server, the
// run's settings, what tx/item counts, and each forwarder's pings.
func printTable(w io.Writer, rep *report) {
	fmt.Fprintf(w, "server %s, %s, %d CPUs, %s measured per scenario after %s warm-up, started %s\n",
		rep.Server, rep.GoVersion, rep.NumCPU, time.Duration(rep.DurationS*float64(time.Second)),
		time.Duration(rep.WarmupS*float64(time.Second)), rep.StartedUTC)
	fmt.Fprintf(w, "tx/item: %s\n", rep.TxCounted)
	for _, p := range rep.Proxy {
		fmt.Fprintf(w, "delay %s each way: %s\n", p.Delay, p.pingNote())
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tdelay\tconns\titems/s\tceiling/s\t× ceiling\tp50 ms\tp95 ms\tp99 ms\tRSS MiB\tµs cpu client+server(+proxy)\t"+
		"tx/item\tround trips/item\ttx retries\tfailed batches\tre-runs\tre-run %\t× River\t  note")
	for _, r := range rep.Results {
		delay := cmp.Or(r.Delay, "-")
		if r.Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%d%s\t  %s\n", r.Scenario, delay, r.Concurrency, strings.Repeat("\t-", 15), r.Note)
			continue
		}
		var share *float64
		if r.RerunShare != nil {
			pct := 100 * *r.RerunShare
			share = &pct
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t  %s\n",
			r.Scenario, delay, r.Concurrency, r.ItemsPerSec, optFloat(r.Ceiling, "%.0f"), optFloat(r.Ratio, "%.2f"),
			optFloat(r.P50ms, "%.2f"), optFloat(r.P95ms, "%.2f"), optFloat(r.P99ms, "%.2f"),
			float64(r.RSSKiB)/1024, cpuCell(r), optFloat(r.TxPerItem, "%.3f"), optFloat(r.RoundTrips, "%.2f"),
			optInt(r.TxRetries), optInt(r.FailedBatches), optInt(r.Reruns), optFloat(share, "%.2f"), optFloat(r.RatioToRiver, "%.2f"), r.Note)
	}
	_ = tw.Flush()
}

// cpuCell is r's CPU per item: the client's and the server's, and the
// forwarder's where it ran, or "-".
func cpuCell(r result) string {
	if r.ClientCPU == nil {
		return "-"
	}
	cell := optFloat(r.ClientCPU, "%.0f") + "+" + optFloat(r.ServerCPU, "%.0f")
	if r.ProxyCPU != nil {
		cell += "+" + optFloat(r.ProxyCPU, "%.0f")
	}
	return cell
}

// optFloat formats v, or "-" if it is nil.
func optFloat(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// optInt formats v, or "-" if it is nil.
func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

// startCPUProfile starts writing the process's CPU profile to path; stop
// ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
