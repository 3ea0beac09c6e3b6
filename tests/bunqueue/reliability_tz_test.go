package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// Scenario 7: the process's time zone and the server sessions' time_zone
// are not UTC, and the sessions' offset changes in the middle of the run,
// as it does at a DST change: schedules still hold.
//
// TestReliabilityTimeZones runs TestReliabilityTimeZonesChild in a child
// process with TZ=America/New_York. The MariaDB server here has no time
// zone tables, so the sessions get fixed offsets: -04:00 (New York's
// summer time), then, for every session at once in the middle of the run,
// -05:00 (its winter time), which is what a server whose own zone is New
// York's sees at the fall-back change. On PostgreSQL the sessions'
// TimeZone goes the same way, from Etc/GMT+4 to Etc/GMT+5 (POSIX signs:
// -04:00, then -05:00; a bare '-04:00' would be read as 4 hours east). Jobs scheduled at instants on both sides
// of New York's 2026 DST changes (two of them at the same wall-clock
// time, 01:30, an hour apart) must run in the order of the instants;
// schedules due during the run (a delay, a run-at, a retry backoff, an
// any-table retry_at) no earlier than due and soon after; and a lease-mode
// job longer than its lease, with two clients on its queue, never twice
// at once.

const relTZChildEnv = "BUNQUEUE_TEST_REL_TZ_CHILD"

func TestReliabilityTimeZones(t *testing.T) {
	if os.Getenv(relTZChildEnv) != "" {
		t.Skip("in the child process")
	}
	relParallel(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestReliabilityTimeZonesChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), relTZChildEnv+"=1", "TZ=America/New_York")
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "reliability:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	require.NoError(t, err, "the child process:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestReliabilityTimeZonesChild")
}

type relTZArgs struct {
	Name string `json:"name"`
}

func (relTZArgs) Kind() string { return "bq_rel_tz" }

// relTZRun is what one attempt of a job saw.
type relTZRun struct {
	Name    string
	Attempt int
	RunAt   time.Time // Job.RunAt
	DBNow   time.Time // UTC_TIMESTAMP(6) (statement_timestamp()) when it started
	Offset  int       // its session's offset from UTC, in minutes
}

func TestReliabilityTimeZonesChild(t *testing.T) {
	if os.Getenv(relTZChildEnv) == "" {
		t.Skip("runs in the child process of TestReliabilityTimeZones")
	}
	name, _ := time.Now().Zone()
	require.Contains(t, []string{"EST", "EDT"}, name, "the process runs in New York's time zone")
	ny := time.Local

	admin := migrated(t, 0)
	in := faultdriver.NewInjector(1)
	// The session statements before and after the change, and the SQL of
	// the session's offset from UTC in minutes.
	summer, winter := "SET time_zone = '-04:00'", "SET time_zone = '-05:00'"
	offsetSQL := "TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW())"
	if dbtest.IsPostgres() {
		summer, winter = "SET TimeZone = 'Etc/GMT+4'", "SET TimeZone = 'Etc/GMT+5'"
		offsetSQL = "(EXTRACT(TIMEZONE FROM now()) / 60)::int"
	}
	in.SetSession(summer)
	db := relFaultDB(t, in, 0)
	var offset int
	require.NoError(t, db.NewRaw("SELECT "+offsetSQL).Scan(t.Context(), &offset))
	require.Equal(t, -240, offset, "the sessions are at -04:00")

	lockQ, leaseQ := ownJobQueue(t, admin), ownJobQueue(t, admin)
	const backoff = 2 * time.Second
	c := jobsTestClient(t, db, bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		Backoff:      func(int) time.Duration { return backoff },
		JobQueues: map[string]bunqueue.JobQueueConfig{
			lockQ:  {Workers: 1},
			leaseQ: {Workers: 1, Mode: bunqueue.ModeLease, Lease: 2 * time.Second},
		},
	})
	// A second client (another process, in effect) works the lease queue
	// too.
	c2 := jobsTestClient(t, relFaultDB(t, in, 0), bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{leaseQ: {Workers: 1, Mode: bunqueue.ModeLease, Lease: 2 * time.Second}},
	})
	var mu sync.Mutex
	var runs []relTZRun
	var leaseRuns relRecorder
	worker := bunqueue.WorkerFunc[relTZArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[relTZArgs]) error {
		r := relTZRun{Name: job.Args.Name, Attempt: job.Attempt, RunAt: job.RunAt}
		if err := db.NewRaw("SELECT "+nowSQL(db)+", "+offsetSQL).Scan(ctx, &r.DBNow, &r.Offset); err != nil {
			return err
		}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
		switch {
		case job.Args.Name == "retry" && job.Attempt == 1:
			return errors.New("first attempt fails (test)")
		case job.Args.Name == "long lease":
			defer leaseRuns.begin(job.ID, 0, fmt.Sprintf("attempt %d", job.Attempt))()
			return relSleep(ctx, 3*time.Second) // past its 2 s lease: heartbeats keep it
		}
		return nil
	})
	require.NoError(t, bunqueue.AddWorker(c, worker))
	require.NoError(t, bunqueue.AddWorker(c2, worker))

	// Instants on both sides of New York's 2026 changes, enqueued in
	// reverse: 01:30 EDT and 01:30 EST on November 1st are an hour apart;
	// 01:59:59 EST and 03:00:01 EDT on March 8th are two seconds apart.
	past := []struct {
		name string
		at   time.Time
	}{
		{"spring 01:59:59 EST", time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC).In(ny)},
		{"spring 03:00:01 EDT", time.Date(2026, 3, 8, 7, 0, 1, 0, time.UTC).In(ny)},
		{"fall 01:30 EDT", time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC).In(ny)},
		{"fall 01:30 EST", time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC).In(ny)},
	}
	require.Equal(t, "01:30", past[2].at.Format("15:04"))
	require.Equal(t, "01:30", past[3].at.Format("15:04"))
	for i := len(past) - 1; i >= 0; i-- {
		enqueueOne(t, c, db, relTZArgs{Name: past[i].name}, &bunqueue.EnqueueOpts{Queue: lockQ, RunAt: past[i].at})
	}

	// An any-table queue whose OnError puts retry_at one second ahead, by
	// the database clock.
	dbtest.Exec(t, admin, relItemDDL)
	run := relToken(8)
	t.Cleanup(func() { relDeleteRun(admin, "bq_rel_item", run) })
	dbtest.Exec(t, admin, fmt.Sprintf("INSERT INTO bq_rel_item (run) VALUES ('%s'), ('%s')", run, run))
	type tableRun struct {
		id    int64
		dbNow time.Time
	}
	var tableRuns []tableRun
	require.NoError(t, c.Add(bunqueue.NewQueue("bq_rel_tz_"+run, relItemQuery(run),
		func(ctx context.Context, tx bun.Tx, it *relFaultItem) error {
			var now time.Time
			if err := tx.NewRaw("SELECT "+nowSQL(tx)).Scan(ctx, &now); err != nil {
				return err
			}
			mu.Lock()
			tableRuns = append(tableRuns, tableRun{it.ID, now})
			mu.Unlock()
			if it.Attempts == 0 {
				return errors.New("first attempt fails (test)")
			}
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[relFaultItem]{OnError: func(ctx context.Context, tx bun.Tx, it *relFaultItem, _ error) error {
			_, err := tx.NewUpdate().Model(it).Set("attempts = attempts + 1").
				Set("retry_at = " + plusSQL(tx, time.Second)).WherePK().Exec(ctx)
			return err
		}})))

	began := time.Now()
	start(t, c)
	start(t, c2)
	enqueueOne(t, c, db, relTZArgs{Name: "delay 1.5s"}, &bunqueue.EnqueueOpts{Queue: lockQ, Delay: 1500 * time.Millisecond})
	enqueueOne(t, c, db, relTZArgs{Name: "run at +2.5s"}, &bunqueue.EnqueueOpts{Queue: lockQ, RunAt: time.Now().In(ny).Add(2500 * time.Millisecond)})
	enqueueOne(t, c, db, relTZArgs{Name: "retry"}, &bunqueue.EnqueueOpts{Queue: lockQ})
	enqueueOne(t, c, db, relTZArgs{Name: "long lease"}, &bunqueue.EnqueueOpts{Queue: leaseQ})
	enqueued := len(past) + 4 + 2

	// The change: every session's offset goes from -04:00 to -05:00.
	time.Sleep(time.Second)
	in.SetSession(winter)
	switched := time.Now()

	require.True(t, relWaitFor(30*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue IN (?, ?)", lockQ, leaseQ) == 0 &&
			count(t, admin, "SELECT COUNT(*) FROM bq_rel_item WHERE run = ? AND status = 'done'", run) == 2
	}), "every job and row done")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("runs: %+v", runs)

	byName := map[string][]relTZRun{}
	var order []string
	for _, r := range runs {
		byName[r.Name] = append(byName[r.Name], r)
		if strings.HasPrefix(r.Name, "spring") || strings.HasPrefix(r.Name, "fall") {
			order = append(order, r.Name)
		}
	}
	var want []string
	for _, p := range past {
		want = append(want, p.name)
		require.Len(t, byName[p.name], 1, p.name)
		require.True(t, byName[p.name][0].RunAt.Equal(p.at), "%s: Job.RunAt %s, enqueued for %s", p.name, byName[p.name][0].RunAt, p.at)
	}
	require.Equal(t, want, order, "the past schedules ran in the order of their instants")

	// Due times during the run, by the database clock: not early, not
	// more than 3 s late.
	late := 3 * time.Second
	check := func(name string, r relTZRun, due time.Time) {
		t.Helper()
		require.False(t, r.DBNow.Before(due), "%s ran at %s, before it was due at %s", name, r.DBNow, due)
		require.Less(t, r.DBNow.Sub(due), late, "%s ran at %s, due at %s", name, r.DBNow, due)
	}
	for _, n := range []string{"delay 1.5s", "run at +2.5s"} {
		require.Len(t, byName[n], 1, n)
		check(n, byName[n][0], byName[n][0].RunAt)
	}
	retry := byName["retry"]
	require.Len(t, retry, 2)
	check("retry", retry[1], retry[0].DBNow.Add(backoff))
	// With two clients on the lease queue, a lease that ran out early (a
	// lease computed on the session's clock would be hours off) would let
	// the other client take the job while the first runs it.
	n, examples := relOverlaps(leaseRuns.all(), nil)
	require.Zero(t, n, "two runs of the lease-mode job overlapped: %v", examples)
	longest := time.Duration(0)
	for _, r := range leaseRuns.all() {
		longest = max(longest, time.Duration(r.End-r.Start))
	}
	sort.Slice(tableRuns, func(i, j int) bool { return tableRuns[i].dbNow.Before(tableRuns[j].dbNow) })
	require.Len(t, tableRuns, 4)
	first := map[int64]time.Time{}
	for _, r := range tableRuns {
		if f, ok := first[r.id]; ok {
			require.GreaterOrEqual(t, r.dbNow.Sub(f), time.Second, "the row's retry_at held")
			require.Less(t, r.dbNow.Sub(f), time.Second+late)
		} else {
			first[r.id] = r.dbNow
		}
	}
	offsets := map[int]bool{}
	for _, r := range runs {
		offsets[r.Offset] = true
	}
	require.True(t, offsets[-240] && offsets[-300], "jobs ran on both sides of the change: %v", offsets)

	rep := &relReport{Scenario: "time zones and a DST change", Mode: "jobs (lock, lease), any table", Enqueued: enqueued,
		Processed: len(byName) + len(first), Duration: time.Since(began)}
	rep.Lost = rep.Enqueued - rep.Processed
	rep.note("process TZ America/New_York; every session's %s %s into the run", map[bool]string{
		false: "time_zone went from -04:00 to -05:00", true: "TimeZone went from Etc/GMT+4 (-04:00) to Etc/GMT+5 (-05:00)"}[dbtest.IsPostgres()],
		switched.Sub(began).Round(100*time.Millisecond))
	rep.note("schedules across both 2026 DST changes (01:30 EDT and 01:30 EST among them) ran in instant order; delay, run-at, retry backoff and retry_at held within [due, due+3s)")
	rep.note("a lease-mode job of 3 s under a 2 s lease ran %d time(s), its longest run %s, never two at once", len(leaseRuns.all()), longest.Round(100*time.Millisecond))
	rep.log(t)
	require.Zero(t, rep.Lost)
}
