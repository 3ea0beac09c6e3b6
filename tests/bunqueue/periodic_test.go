package bunqueue_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type periodicArgs struct{}

func (periodicArgs) Kind() string { return "bq_test_periodic" }

const (
	periodicClients = 3
	periodicCatchUp = 3 * time.Second
	periodicDown    = 7 * time.Second // all clients stopped: longer than the catch-up window
	periodicAfter   = 4 * time.Second // run again after the restart
	// periodicSlop is what the process clock, read around Start, may be
	// off from when a client first looks at the schedule.
	periodicSlop = 500 * time.Millisecond
)

// periodicRun is how long the clients run the schedule before they all
// stop: a minute with BUNQUEUE_LONG=1, 12 s by default.
func periodicRun() time.Duration {
	if os.Getenv("BUNQUEUE_LONG") == "1" {
		return 60 * time.Second
	}
	return 12 * time.Second
}

// tickLog records the tick (the job's RunAt) of every job run, and how
// many times each ran.
type tickLog struct {
	mu   sync.Mutex
	runs map[int64]int // tick (µs) → runs
}

func (l *tickLog) add(tick time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[int64]int{}
	}
	l.runs[tick.UnixMicro()]++
}

// periodicClient returns a client of its own pool on srv that keeps the
// schedules pjs and runs their jobs, recording them in logs by queue.
func periodicClient(t *testing.T, srv dbtest.Server, pjs []bunqueue.PeriodicJob, logs map[string]*tickLog) *bunqueue.Client {
	t.Helper()
	queues := map[string]bunqueue.JobQueueConfig{}
	for _, pj := range pjs {
		queues[pj.Opts.Queue] = bunqueue.JobQueueConfig{Workers: 1}
	}
	c := jobsTestClient(t, srv.Open(t, 0), bunqueue.Config{PollInterval: 50 * time.Millisecond, JobQueues: queues, PeriodicJobs: pjs})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[periodicArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[periodicArgs]) error {
		logs[job.Queue].add(job.RunAt)
		return nil // the job is deleted as it completes: the schedule's record, not the job, says the tick was enqueued
	})))
	return c
}

// forgetSchedule deletes, when the test ends, the record of the schedule
// named name and the jobs of its queue.
func forgetSchedule(t *testing.T, db *bun.DB, name, queue string) {
	t.Cleanup(func() {
		deleteJobQueueRows(db, queue)
		_, _ = db.NewRaw("DELETE FROM bunqueue_periodic WHERE name = ?", name).Exec(context.Background())
	})
}

// startAll starts clients and returns when the first Start began and
// the last returned.
func startAll(t *testing.T, clients []*bunqueue.Client) (began, started time.Time) {
	t.Helper()
	began = time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { require.NoError(t, c.Start(t.Context())) })
	}
	wg.Wait()
	return began, time.Now()
}

func stopAll(t *testing.T, clients []*bunqueue.Client) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { require.NoError(t, c.Stop(t.Context())) })
	}
	wg.Wait()
}

// Three clients on separate pools keep two 1-second schedules, an
// interval and a cron expression: each tick runs once (jobs are deleted
// as they complete, and are not enqueued again), about one a second;
// after every client stopped for longer than the catch-up window, the
// ticks missed within it run once at the restart, the older ones never.
func TestPeriodicOncePerTick(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		var pjs []bunqueue.PeriodicJob
		logs := map[string]*tickLog{}
		for _, kind := range []string{"every", "cron"} {
			pj := bunqueue.PeriodicJob{Name: dbtest.Name("bq_test_periodic_" + kind), Args: periodicArgs{},
				Opts: &bunqueue.EnqueueOpts{Queue: jobQueue(t)}, CatchUp: periodicCatchUp}
			if kind == "every" {
				pj.Every = time.Second
			} else {
				pj.Cron = "* * * * * *"
			}
			pjs = append(pjs, pj)
			logs[pj.Opts.Queue] = &tickLog{}
			forgetSchedule(t, db, pj.Name, pj.Opts.Queue)
		}
		fleet := func() []*bunqueue.Client {
			cs := make([]*bunqueue.Client, periodicClients)
			for i := range cs {
				cs[i] = periodicClient(t, srv, pjs, logs)
			}
			return cs
		}

		first := fleet()
		began, _ := startAll(t, first)
		time.Sleep(periodicRun())
		stopAll(t, first)
		stopped := time.Now()
		ran := time.Since(began)
		time.Sleep(periodicDown)
		second := fleet()
		restart, restarted := startAll(t, second)
		time.Sleep(periodicAfter)
		stopAll(t, second)

		for _, pj := range pjs {
			queue := pj.Opts.Queue
			all := ticksOf(t, db, queue, logs[queue])
			phase1 := all[:countBefore(all, stopped)]
			want := int(ran.Round(time.Second) / time.Second)
			t.Logf("%s: %d ticks in %s, then %d after the restart", pj.Name, len(phase1), ran.Round(time.Millisecond), len(all)-len(phase1))
			require.InDelta(t, want, len(phase1), 1, "%s: a tick a second for %s, over %d clients", pj.Name, ran, periodicClients)
			// On one grid of whole seconds (the interval's, from its first
			// tick), none twice (ticksOf checks that), one gap: the stop.
			for i := 1; i < len(all); i++ {
				require.Zero(t, (all[i]-all[0])%time.Second.Microseconds(), "%s: tick %d is on the schedule's grid", pj.Name, i)
			}
			require.Greater(t, len(all), len(phase1), "%s: ticks after the restart", pj.Name)
			resumed := time.UnixMicro(all[len(phase1)])
			require.False(t, resumed.Before(restart.Add(-periodicCatchUp-periodicSlop)),
				"%s: a tick older than the catch-up window is skipped: %s, restart at %s", pj.Name, resumed, restart)
			require.False(t, resumed.After(restarted.Add(-periodicCatchUp+periodicSlop+time.Second)),
				"%s: the ticks within the catch-up window run: first %s, restart at %s", pj.Name, resumed, restarted)
			require.InDelta(t, int((periodicCatchUp+periodicAfter)/time.Second), len(all)-len(phase1), 2,
				"%s: the window caught up, then a tick a second", pj.Name)
		}
	})
}

// countBefore is how many of ticks, sorted, are not after t.
func countBefore(ticks []int64, t time.Time) int {
	n, _ := slices.BinarySearch(ticks, t.UnixMicro()+1)
	return n
}

// ticksOf waits until every job of queue has run, requires that none ran
// twice, and returns their ticks, sorted.
func ticksOf(t *testing.T, db *bun.DB, queue string, log *tickLog) []int64 {
	t.Helper()
	var left []time.Time
	require.NoError(t, db.NewRaw("SELECT run_at FROM bunqueue_jobs WHERE queue = ?", queue).Scan(t.Context(), &left))
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.runs == nil {
		log.runs = map[int64]int{}
	}
	var ticks []int64
	for tick, n := range log.runs {
		require.Equal(t, 1, n, "the tick %s ran %d times", time.UnixMicro(tick).UTC(), n)
		ticks = append(ticks, tick)
	}
	for _, l := range left { // enqueued before the stop, not yet run
		_, dup := log.runs[l.UnixMicro()]
		require.False(t, dup, "the tick %s was enqueued twice", l.UTC())
		ticks = append(ticks, l.UnixMicro())
		log.runs[l.UnixMicro()] = 1
	}
	_, err := db.NewRaw("DELETE FROM bunqueue_jobs WHERE queue = ?", queue).Exec(t.Context())
	require.NoError(t, err)
	slices.Sort(ticks)
	require.Equal(t, len(ticks), len(slices.Compact(slices.Clone(ticks))), "no tick twice")
	return ticks
}

// A schedule new to the database with RunOnStart runs at once, once,
// however many clients start; a client started later adds nothing; and
// after every process was down past the catch-up window of a daily
// schedule, one job runs at once in place of the missed ticks.
func TestPeriodicRunOnStart(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		queue := jobQueue(t)
		pj := bunqueue.PeriodicJob{Name: dbtest.Name("bq_test_periodic_start"), Cron: "0 3 * * *", Args: periodicArgs{},
			Opts: &bunqueue.EnqueueOpts{Queue: queue}, RunOnStart: true}
		forgetSchedule(t, db, pj.Name, queue)
		jobs := func() int { return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) }
		scheduler := func() *bunqueue.Client { // enqueues only: no worker
			return jobsTestClient(t, srv.Open(t, 0), bunqueue.Config{
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, PeriodicJobs: []bunqueue.PeriodicJob{pj},
			})
		}
		first := []*bunqueue.Client{scheduler(), scheduler()}
		startAll(t, first)
		eventually(t, 10*time.Second, func() bool { return jobs() >= 1 }, "the new schedule runs at start")
		late := scheduler()
		start(t, late)
		time.Sleep(time.Second)
		require.Equal(t, 1, jobs(), "once, whichever clients start")
		stopAll(t, append(first, late))

		// Every process was down for three days.
		var next int64
		require.NoError(t, db.NewRaw("SELECT next_tick FROM bunqueue_periodic WHERE name = ?", pj.Name).Scan(t.Context(), &next))
		require.True(t, time.UnixMicro(next).After(time.Now()), "the next tick is the schedule's, tomorrow at 03:00 UTC at the latest")
		require.Equal(t, 3, time.UnixMicro(next).UTC().Hour())
		days := (72 * time.Hour).Microseconds()
		_, err := db.NewRaw("UPDATE bunqueue_periodic SET next_tick = next_tick - ?, last_tick = last_tick - ? WHERE name = ?", days, days, pj.Name).Exec(t.Context())
		require.NoError(t, err)
		again := scheduler()
		start(t, again)
		eventually(t, 10*time.Second, func() bool { return jobs() == 2 }, "one job in place of the missed ticks")
		time.Sleep(500 * time.Millisecond)
		require.Equal(t, 2, jobs())
		var after int64
		require.NoError(t, db.NewRaw("SELECT next_tick FROM bunqueue_periodic WHERE name = ?", pj.Name).Scan(t.Context(), &after))
		require.Equal(t, next, after, "the schedule goes on at its next tick")
	})
}

type unencodable struct{ C chan int }

func (unencodable) Kind() string { return "bq_test_unencodable" }

// A periodic job that cannot run is refused by NewClient, with an error
// that names its field and wraps ErrInvalidJob.
func TestPeriodicBadInput(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	ok := bunqueue.PeriodicJob{Name: "bq_test_periodic_ok", Every: time.Minute, Args: periodicArgs{}}
	with := func(f func(*bunqueue.PeriodicJob)) []bunqueue.PeriodicJob {
		pj := ok
		f(&pj)
		return []bunqueue.PeriodicJob{pj}
	}
	for _, tc := range []struct {
		name string
		jobs []bunqueue.PeriodicJob
		want string
	}{
		{"invalid cron", with(func(p *bunqueue.PeriodicJob) { p.Every, p.Cron = 0, "61 * * * *" }), `Config.PeriodicJobs[0] ("bq_test_periodic_ok").Cron: "61 * * * *" is not a cron expression`},
		{"cron that never matches", with(func(p *bunqueue.PeriodicJob) { p.Every, p.Cron = 0, "0 0 30 2 *" }), `.Cron: "0 0 30 2 *" never matches`},
		{"time zone in the cron", with(func(p *bunqueue.PeriodicJob) { p.Every, p.Cron = 0, "CRON_TZ=Europe/Paris 0 9 * * *" }), ".Cron: sets a time zone"},
		{"zero interval", with(func(p *bunqueue.PeriodicJob) { p.Every = 0 }), ".Every: the schedule is missing"},
		{"short interval", with(func(p *bunqueue.PeriodicJob) { p.Every = time.Millisecond }), ".Every must be at least 1s, got 1ms"},
		{"both", with(func(p *bunqueue.PeriodicJob) { p.Cron = "@hourly" }), ".Cron and Every are both set"},
		{"no name", with(func(p *bunqueue.PeriodicJob) { p.Name = "" }), "Config.PeriodicJobs[0].Name must have 1 to 128 bytes"},
		{"duplicate name", append(with(func(*bunqueue.PeriodicJob) {}), ok), `Config.PeriodicJobs[1] ("bq_test_periodic_ok").Name: another periodic job has this name`},
		{"unknown queue", with(func(p *bunqueue.PeriodicJob) { p.Opts = &bunqueue.EnqueueOpts{Queue: "nope"} }), `.Opts: unknown queue "nope"`},
		{"run at", with(func(p *bunqueue.PeriodicJob) { p.Opts = &bunqueue.EnqueueOpts{Delay: time.Second} }), ".Opts.Delay must be zero"},
		{"bad option", with(func(p *bunqueue.PeriodicJob) { p.Opts = &bunqueue.EnqueueOpts{Priority: 1 << 20} }), ".Opts: EnqueueOpts.Priority must be within"},
		{"nil args", with(func(p *bunqueue.PeriodicJob) { p.Args = nil }), ".Args must not be nil"},
		{"args not JSON", with(func(p *bunqueue.PeriodicJob) { p.Args = unencodable{} }), ".Args: encode as JSON"},
		{"catch-up", with(func(p *bunqueue.PeriodicJob) { p.CatchUp = time.Millisecond }), ".CatchUp must be zero (for PeriodicCatchUpDefault) or at least 1s, got 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bunqueue.NewClient(db, &bunqueue.Config{PeriodicJobs: tc.jobs})
			require.Error(t, err)
			require.True(t, errors.Is(err, bunqueue.ErrInvalidJob), "%v wraps ErrInvalidJob", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := bunqueue.NewClient(db, &bunqueue.Config{PeriodicJobs: []bunqueue.PeriodicJob{ok}})
	require.NoError(t, err)
}

// The periodic records' clock, NowMicros, is the database clock in
// microseconds since the epoch: the instant of Now whatever the
// session's time zone.
func TestPeriodicDatabaseClock(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 1)
		d := dialectOf(db)
		conn, err := db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		switch srv.Name {
		case "mysql":
			_, err = conn.ExecContext(t.Context(), "SET time_zone = '+05:00'")
		case "postgres":
			_, err = conn.ExecContext(t.Context(), "SET TIME ZONE 'America/New_York'")
		}
		require.NoError(t, err)
		var micros int64
		var clock any // SQLite's is text
		require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT "+d.NowMicros()+", "+d.Now()).Scan(&micros, &clock))
		now, ok := clock.(time.Time)
		if !ok {
			now, err = time.Parse("2006-01-02 15:04:05.999999-07:00", clock.(string))
			require.NoError(t, err)
		}
		require.WithinDuration(t, now, time.UnixMicro(micros), 2*time.Millisecond, "the instant of Now")
		require.WithinDuration(t, time.Now(), time.UnixMicro(micros), 5*time.Second, "the server's clock")
	})
}

// A schedule changed in the code takes effect at once where the new one
// ticks sooner: the record's next tick, set by the old schedule an hour
// ahead, moves to the new one's.
func TestPeriodicScheduleChanged(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		queue := jobQueue(t)
		pj := bunqueue.PeriodicJob{Name: dbtest.Name("bq_test_periodic_changed"), Every: time.Hour, Args: periodicArgs{},
			Opts: &bunqueue.EnqueueOpts{Queue: queue}}
		forgetSchedule(t, db, pj.Name, queue)
		scheduler := func(pj bunqueue.PeriodicJob) *bunqueue.Client {
			return jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}, PeriodicJobs: []bunqueue.PeriodicJob{pj}})
		}
		hourly := scheduler(pj)
		start(t, hourly)
		eventually(t, 10*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bunqueue_periodic WHERE name = ?", pj.Name) == 1
		}, "the schedule is recorded")
		require.NoError(t, hourly.Stop(t.Context()))
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))

		pj.Every = time.Second
		start(t, scheduler(pj))
		eventually(t, 10*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) >= 2
		}, "the new schedule ticks")
		var schedule string
		require.NoError(t, db.NewRaw("SELECT schedule FROM bunqueue_periodic WHERE name = ?", pj.Name).Scan(t.Context(), &schedule))
		require.Equal(t, "every 1s", schedule)
	})
}

// Start refuses periodic jobs where the periodic table is missing (jobs
// tables migrated before schema version 5), and says to migrate.
func TestPeriodicNotMigrated(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := emptyDB(t, srv)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		dbtest.Exec(t, db, "DROP TABLE bunqueue_periodic")
		c := jobsTestClient(t, db, bunqueue.Config{PeriodicJobs: []bunqueue.PeriodicJob{
			{Name: "bq_test_periodic_unmigrated", Every: time.Minute, Args: periodicArgs{}},
		}})
		err := c.Start(t.Context())
		require.Error(t, err)
		require.Contains(t, err.Error(), "bunqueue_periodic")
		require.Contains(t, err.Error(), "run bunqueue.Migrate")
	})
}
