package bunqueue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/histsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// fleetTotals adds up a FleetHistory's minutes, and its quarter hours.
type fleetTotals struct{ processed, failed, started, waits, qProcessed, qFailed, qStarted int64 }

func totalsOf(h bunqueue.FleetHistory) fleetTotals {
	var t fleetTotals
	for _, p := range h.Minutes {
		t.processed, t.failed, t.started = t.processed+p.Processed, t.failed+p.Failed, t.started+p.Started
		for _, n := range p.Waits {
			t.waits += n
		}
	}
	for _, p := range h.Quarters {
		t.qProcessed, t.qFailed, t.qStarted = t.qProcessed+p.Processed, t.qFailed+p.Failed, t.qStarted+p.Started
	}
	return t
}

// Three clients on pools of their own, as three app servers, run the
// jobs of one queue; each one's FleetHistory then returns the same
// totals, those the handlers counted: by minute and by quarter hour, the
// waits' histograms merged into one whose count is the jobs started.
// Each client adds its counts with its next heartbeat after the jobs
// ended, so the totals agree within a heartbeat of the last job; the
// wait allows for a loaded machine.
func TestFleetHistory(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		tbl := bunqueue.Tables{Prefix: dbtest.Name("fh") + "_"}
		admin := srv.Open(t, 0)
		dbtest.DropTables(t, admin, tbl)
		require.NoError(t, tbl.Migrate(ctx, admin))
		queue := dbtest.Name("fhq")
		var done, failed atomic.Int64
		clients := make([]*bunqueue.Client, 3)
		for i := range clients {
			c, err := bunqueue.NewClient(srv.Open(t, 0), &bunqueue.Config{Tables: tbl, HeartbeatInterval: 100 * time.Millisecond,
				PollInterval: 50 * time.Millisecond, JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}}})
			require.NoError(t, err)
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ownedArgs](func(_ context.Context, _ bun.IDB, job *bunqueue.Job[ownedArgs]) error {
				if job.Args.Fail {
					failed.Add(1)
					return errors.New("fails for good")
				}
				done.Add(1)
				return nil
			})))
			clients[i] = c
			start(t, c)
		}
		const jobs = 60
		for n := range jobs {
			_, err := clients[n%3].Enqueue(ctx, admin, ownedArgs{N: n, Fail: n%10 == 0}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 1})
			require.NoError(t, err)
		}
		eventually(t, 30*time.Second, func() bool { return done.Load()+failed.Load() == jobs }, "the handlers ran every job")
		want := fleetTotals{processed: done.Load(), failed: failed.Load(), started: jobs, waits: jobs,
			qProcessed: done.Load(), qFailed: failed.Load(), qStarted: jobs}
		require.Equal(t, int64(jobs/10), want.failed)
		for i, c := range clients {
			var got fleetTotals
			eventually(t, 10*time.Second, func() bool {
				h, err := c.FleetHistory(ctx, queue)
				require.NoError(t, err)
				require.Len(t, h.Minutes, bunqueue.FleetHistoryMinutes)
				require.Len(t, h.Quarters, bunqueue.FleetHistoryQuarters)
				got = totalsOf(h)
				return got == want
			}, "client %d reads the fleet's totals", i)
			all, err := c.FleetHistory(ctx, "")
			require.NoError(t, err)
			require.Equal(t, want, totalsOf(all), "every queue: the one queue")
		}
		h, err := clients[0].FleetHistory(ctx, queue)
		require.NoError(t, err)
		last := h.Minutes[len(h.Minutes)-1]
		require.Zero(t, last.At.Unix()%60, "minutes start on whole minutes")
		require.Equal(t, time.Minute, h.Minutes[1].At.Sub(h.Minutes[0].At))
		require.Equal(t, 15*time.Minute, h.Quarters[1].At.Sub(h.Quarters[0].At))
		for _, p := range h.Minutes {
			require.LessOrEqual(t, p.WaitP50, p.WaitP95)
			require.LessOrEqual(t, p.WaitP95, p.WaitMax)
		}
		eventually(t, 20*time.Second, func() bool {
			h, err := clients[1].FleetHistory(ctx, queue)
			require.NoError(t, err)
			for _, p := range h.Minutes {
				if p.Depth >= 0 {
					return true
				}
			}
			return false
		}, "the lease's holder samples the depth")
	})
}

// histSQL returns the history's statements on db for the tables tbl.
func histSQL(t *testing.T, db *bun.DB, tbl bunqueue.Tables) histsql.SQL {
	t.Helper()
	d, err := sqldialect.For(db)
	require.NoError(t, err)
	names, err := tables.New("Tables", tbl.Prefix, tbl.Schema)
	require.NoError(t, err)
	return histsql.New(d, names)
}

// The roll-up moves the minute rows before its bound into quarter-hour
// rows, adding to a quarter's row that exists, and keeps every total:
// rows inserted at old bucket times, two queues, two quarters.
func TestFleetHistoryRoll(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		tbl := bunqueue.Tables{Prefix: dbtest.Name("fr") + "_"}
		db := srv.Open(t, 0)
		dbtest.DropTables(t, db, tbl)
		require.NoError(t, tbl.Migrate(ctx, db))
		h := histSQL(t, db, tbl)
		const q0 = 1_700_000_100 - 1_700_000_100%900 // a quarter's start
		insert := func(queue string, res, bucket, processed, failed, started, w3, maxUS, depth int64) {
			_, err := db.NewRaw("INSERT INTO "+h.Table()+" (queue, res, bucket, processed, failed, started, w03, wait_max_us, depth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
				queue, res, bucket, processed, failed, started, w3, maxUS, depth).Exec(ctx)
			require.NoError(t, err)
		}
		for m := range int64(30) { // two quarters by the minute, queue a
			insert("a", 60, q0+m*60, m, 1, 2, 2, 4000+m, m%7)
		}
		insert("b", 60, q0+5*60, 10, 0, 3, 3, 5000, -1)
		insert("a", 900, q0, 100, 0, 0, 0, 9000, 50) // a quarter already rolled up
		insert("a", 60, q0+40*60, 7, 0, 0, 0, 0, -1) // after the bound: stays
		before := int64(q0 + 30*60)
		for range 2 { // a second roll-up finds nothing to move
			require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return h.Roll(ctx, tx, before) }))
		}
		rows, err := h.List(ctx, db, "", 0)
		require.NoError(t, err)
		byKey := map[string]histsql.Row{}
		for _, r := range rows {
			byKey[r.Queue+"/"+strconv.FormatInt(r.Res, 10)+"/"+strconv.FormatInt(r.Bucket-q0, 10)] = r
		}
		require.Len(t, byKey, 4, "%v", rows)
		a0, a1, b0 := byKey["a/900/0"], byKey["a/900/900"], byKey["b/900/0"]
		require.Equal(t, int64(100+105), a0.Processed, "0..14 added to the quarter's 100")
		require.Equal(t, int64(330), a1.Processed, "15..29")
		require.Equal(t, [3]int64{15, 30, 30}, [3]int64{a0.Failed, a0.Started, a0.Waits[3]})
		require.Equal(t, [3]int64{15, 30, 30}, [3]int64{a1.Failed, a1.Started, a1.Waits[3]})
		require.Equal(t, int64(9000), a0.WaitMaxMicros, "the larger longest wait")
		require.Equal(t, int64(4029), a1.WaitMaxMicros)
		require.Equal(t, int64(50), a0.Depth, "the largest depth")
		require.Equal(t, int64(6), a1.Depth)
		require.Equal(t, [4]int64{10, 3, 3, -1}, [4]int64{b0.Processed, b0.Started, b0.Waits[3], b0.Depth})
		require.Equal(t, int64(7), byKey["a/60/2400"].Processed, "a minute after the bound stays")

		require.NoError(t, h.Purge(ctx, db, q0+900))
		rows, err = h.List(ctx, db, "", 0)
		require.NoError(t, err)
		require.Len(t, rows, 2, "the quarters before the bound are gone: a's second quarter and its late minute stay")
	})
}

// The upkeep's lease has one holder at a time, by the database clock:
// another claims it only once it expired or was released.
func TestFleetHistoryLease(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		tbl := bunqueue.Tables{Prefix: dbtest.Name("fl") + "_"}
		db := srv.Open(t, 0)
		dbtest.DropTables(t, db, tbl)
		require.NoError(t, tbl.Migrate(ctx, db))
		h := histSQL(t, db, tbl)
		claim := func(holder string, ttl time.Duration) bool {
			ok, err := h.Claim(ctx, db, "l", holder, ttl)
			require.NoError(t, err)
			return ok
		}
		require.True(t, claim("a", time.Hour), "the first claim adds the row")
		require.False(t, claim("b", time.Hour), "held by a")
		require.True(t, claim("a", 300*time.Millisecond), "a renews")
		require.False(t, claim("b", time.Hour))
		eventually(t, 10*time.Second, func() bool { return claim("b", time.Hour) }, "b takes it once a's expired")
		require.False(t, claim("a", time.Hour), "held by b")
		require.NoError(t, h.Release(ctx, db, "l", "a"), "a releases nothing it does not hold")
		require.False(t, claim("a", time.Hour))
		require.NoError(t, h.Release(ctx, db, "l", "b"))
		require.True(t, claim("a", time.Hour), "b released it")
	})
}

// depthWrites counts, through a query hook on one client's pool, the
// statements that write into the history table: with no job run, the
// depth samples of the upkeep's lease holder.
type depthWrites struct {
	prefix string
	n      atomic.Int64
}

func (w *depthWrites) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }
func (w *depthWrites) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if strings.HasPrefix(e.Query, "INSERT INTO "+w.prefix) && e.Err == nil {
		w.n.Add(1)
	}
}

// Of two clients, one at a time samples the depth, the holder of the
// upkeep's lease: the other samples nothing while it lives, and takes
// over once the holder stopped (and released the lease).
func TestFleetHistoryOneSampler(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		ctx := t.Context()
		tbl := bunqueue.Tables{Prefix: dbtest.Name("fs") + "_"}
		admin := srv.Open(t, 0)
		dbtest.DropTables(t, admin, tbl)
		require.NoError(t, tbl.Migrate(ctx, admin))
		queue := dbtest.Name("fsq")
		writes := make([]*depthWrites, 2)
		clients := make([]*bunqueue.Client, 2)
		for i := range clients {
			db := srv.Open(t, 0)
			writes[i] = &depthWrites{prefix: tbl.Prefix + "history"}
			db.AddQueryHook(writes[i])
			c, err := bunqueue.NewClient(db, &bunqueue.Config{Tables: tbl, HeartbeatInterval: 50 * time.Millisecond,
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}}})
			require.NoError(t, err)
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[ownedArgs](func(context.Context, bun.IDB, *bunqueue.Job[ownedArgs]) error { return nil })))
			clients[i] = c
			start(t, c)
		}
		eventually(t, 20*time.Second, func() bool { return writes[0].n.Load()+writes[1].n.Load() >= 3 }, "three samples")
		holder := 0
		if writes[1].n.Load() > 0 {
			holder = 1
		}
		other := 1 - holder
		require.Zero(t, writes[other].n.Load(), "one sampler: the other client wrote no sample")
		require.NoError(t, clients[holder].Stop(ctx))
		eventually(t, 20*time.Second, func() bool { return writes[other].n.Load() > 0 }, "the other client takes over")
	})
}
