package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type statsItem struct {
	bun.BaseModel `bun:"table:bq_test_stats"`
	ID            int64 `bun:",pk"`
	Done          bool
}

type statsArgs struct {
	Result string `json:"result"` // ok, cancel, snooze, retry
}

func (statsArgs) Kind() string { return "stats_test" }

// statsOf returns the stats of the queue named name.
func statsOf(t *testing.T, c *bunqueue.Client, name string) bunqueue.QueueStats {
	t.Helper()
	all, err := c.Stats(t.Context())
	require.NoError(t, err)
	for _, s := range all {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stats for queue %q in %+v", name, all)
	return bunqueue.QueueStats{}
}

// Stats of a queue over a table: its settings and depth before Start, the
// row a worker holds in flight, then what was processed and what failed.
func TestStatsTableQueue(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_stats", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_stats (id) VALUES (1), (2), (3), (4), (5), (6), (7)")

	c := newClient(t, db)
	holding, release := make(chan struct{}), make(chan struct{})
	q := bunqueue.NewQueue("stats",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *statsItem) error {
			switch it.ID {
			case 1:
				close(holding)
				<-release
			case 6, 7:
				return errors.New("stats test: this row fails")
			}
			_, err := tx.NewUpdate().Model(it).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[statsItem]{Workers: 2, BatchSize: 1})
	require.NoError(t, c.Add(q))

	before := statsOf(t, c, "stats")
	require.Equal(t, bunqueue.QueueStats{Name: "stats", Kind: bunqueue.QueueKindTable, Table: "bq_test_stats", Workers: 2, Depth: 7}, before)

	start(t, c)
	<-holding
	eventually(t, 10*time.Second, func() bool {
		s := statsOf(t, c, "stats")
		return s.InFlight == 1 && s.ProcessedLastMinute == 4 && s.FailedLastMinute >= 2
	}, "rows 2-5 processed, 6 and 7 failed, row 1 in flight")
	s := statsOf(t, c, "stats")
	require.Equal(t, 2, s.Depth, "rows 6 and 7 wait (row 1 is locked)")
	require.Equal(t, int64(4), s.ProcessedLastHour)
	require.GreaterOrEqual(t, s.FailedLastHour, s.FailedLastMinute)
	recent := c.RecentFailures()
	require.NotEmpty(t, recent)
	require.Equal(t, "stats", recent[0].Queue)
	require.Contains(t, []string{"id=6", "id=7"}, recent[0].Key)
	require.Equal(t, "stats test: this row fails", recent[0].Error)
	require.WithinDuration(t, time.Now(), recent[0].At, time.Minute)

	close(release)
	eventually(t, 10*time.Second, func() bool {
		s := statsOf(t, c, "stats")
		return s.InFlight == 0 && s.ProcessedLastMinute == 5
	}, "row 1 processed, nothing in flight")
}

// Stats of jobs queues, in lock and lease mode: completed jobs are
// processed; a cancelled job and a retried attempt are failures; a snooze
// is neither.
func TestStatsJobQueues(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	lock, lease := jobQueue(t), jobQueue(t)
	t.Cleanup(func() {
		for _, q := range []string{lock, lease} {
			_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", q)
			_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", q)
		}
	})
	c, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
		Backoff: func(int) time.Duration { return time.Hour },
		JobQueues: map[string]bunqueue.JobQueueConfig{
			lock:  {Workers: 2},
			lease: {Workers: 3, Mode: bunqueue.ModeLease, Lease: 5 * time.Second},
		},
	})
	require.NoError(t, err)

	all, err := c.Stats(t.Context())
	require.NoError(t, err)
	require.Empty(t, all, "no jobs queues without workers")

	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[statsArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[statsArgs]) error {
		switch job.Args.Result {
		case "cancel":
			return bunqueue.Cancel(errors.New("stats test: cancelled"))
		case "snooze":
			return bunqueue.Snooze(time.Hour)
		case "retry":
			return errors.New("stats test: retry later")
		}
		return nil
	})))
	for _, q := range []string{lock, lease} {
		for _, r := range []string{"ok", "ok", "ok", "cancel", "snooze", "retry"} {
			_, err := c.Enqueue(t.Context(), db, statsArgs{Result: r}, &bunqueue.EnqueueOpts{Queue: q})
			require.NoError(t, err)
		}
	}
	s := statsOf(t, c, lock)
	require.Equal(t, bunqueue.QueueStats{Name: lock, Kind: bunqueue.QueueKindJobs, Table: "bunqueue_jobs", Workers: 2, Depth: 6}, s)
	require.Equal(t, 3, statsOf(t, c, lease).Workers)

	start(t, c)
	for _, q := range []string{lock, lease} {
		eventually(t, 15*time.Second, func() bool {
			s := statsOf(t, c, q)
			return s.ProcessedLastMinute == 3 && s.FailedLastMinute == 2 && s.Depth == 0 && s.InFlight == 0
		}, "queue %s: 3 completed, 2 failed (cancel, retry), the snooze run but not counted", q)
		s := statsOf(t, c, q)
		require.Equal(t, 0, s.Depth, "%s: the snoozed and the retried job wait for later", q)
		require.Equal(t, int64(3), s.ProcessedLastHour)
		require.Equal(t, int64(2), s.FailedLastHour)
		require.Equal(t, 0, s.InFlight)
	}
}

type statsCapItem struct {
	bun.BaseModel `bun:"table:bq_test_stats_cap"`
	ID            int64 `bun:",pk"`
	Done          bool
}

type statsGoneItem struct {
	bun.BaseModel `bun:"table:bq_test_stats_gone"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// A depth beyond QueueDepthLimit is reported as QueueDepthLimit; a queue
// whose table is gone has Depth -1 and an error, with the others' stats.
func TestStatsDepthCapAndError(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_stats_cap", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)")
	createTable(t, db, "bq_test_stats_gone", "id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE")
	n := bunqueue.QueueDepthLimit + 50
	for from := 1; from <= n; from += 1000 {
		var values []string
		for id := from; id < from+1000 && id <= n; id++ {
			values = append(values, fmt.Sprintf("(%d)", id))
		}
		dbtest.Exec(t, db, "INSERT INTO bq_test_stats_cap (id) VALUES "+strings.Join(values, ","))
	}
	query := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") }
	c := newClient(t, db,
		bunqueue.NewQueue("stats-cap", query, func(context.Context, bun.Tx, *statsCapItem) error { return nil }, nil),
		bunqueue.NewQueue("stats-gone", query, func(context.Context, bun.Tx, *statsGoneItem) error { return nil }, nil))
	dbtest.Exec(t, db, "DROP TABLE bq_test_stats_gone")

	all, err := c.Stats(t.Context())
	require.Error(t, err)
	require.Contains(t, err.Error(), `queue "stats-gone"`)
	require.Len(t, all, 2)
	require.Equal(t, bunqueue.QueueDepthLimit, all[0].Depth)
	require.Equal(t, -1, all[1].Depth)
}

type statsLimitItem struct {
	bun.BaseModel `bun:"table:bq_test_stats_limits"`
	ID            int64 `bun:",pk"`
	Customer      int64
	Done          bool
}

// Stats reports the limits in force on a table queue and on jobs queues
// (lock and lease mode), as configured, and none on a queue without.
func TestStatsLimits(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		srvTable(t, db, "bq_test_stats_limits", "id BIGINT PRIMARY KEY, customer BIGINT, done BOOLEAN NOT NULL DEFAULT FALSE")
		lock, lease, plain := jobQueue(t), jobQueue(t), jobQueue(t)
		perSecond, perMinute := bunqueue.Rate{N: 50, Per: time.Second}, bunqueue.Rate{N: 2, Per: time.Minute}
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t), JobQueues: map[string]bunqueue.JobQueueConfig{
			lock:  {Workers: 4, GlobalLimit: 3, KeyLimit: 1, RateLimit: perSecond},
			lease: {Workers: 2, Mode: bunqueue.ModeLease, Lease: 5 * time.Second, KeyRate: perMinute},
			plain: {Workers: 1},
		}})
		require.NoError(t, err)
		q := bunqueue.NewQueue("stats_limits",
			func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE") },
			func(context.Context, bun.Tx, *statsLimitItem) error { return nil },
			&bunqueue.QueueConfig[statsLimitItem]{Workers: 3, GlobalLimit: 2, KeyLimit: 1, KeyColumn: "customer",
				RateLimit: perSecond, KeyRate: perMinute})
		require.NoError(t, c.Add(q))
		require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[statsArgs](func(context.Context, bun.IDB, *bunqueue.Job[statsArgs]) error {
			return nil
		})))

		s := statsOf(t, c, "stats_limits")
		require.Equal(t, bunqueue.QueueStats{Name: "stats_limits", Kind: bunqueue.QueueKindTable, Table: "bq_test_stats_limits",
			Workers: 2, GlobalLimit: 2, KeyLimit: 1, KeyColumn: "customer", RateLimit: perSecond, KeyRate: perMinute}, s)
		s = statsOf(t, c, lock)
		require.Equal(t, []any{3, 1, "limit_key", perSecond, bunqueue.Rate{}}, []any{s.GlobalLimit, s.KeyLimit, s.KeyColumn, s.RateLimit, s.KeyRate})
		s = statsOf(t, c, lease)
		require.Equal(t, []any{0, 0, "limit_key", bunqueue.Rate{}, perMinute}, []any{s.GlobalLimit, s.KeyLimit, s.KeyColumn, s.RateLimit, s.KeyRate})
		s = statsOf(t, c, plain)
		require.Equal(t, []any{0, 0, "", bunqueue.Rate{}, bunqueue.Rate{}}, []any{s.GlobalLimit, s.KeyLimit, s.KeyColumn, s.RateLimit, s.KeyRate})
	})
}
