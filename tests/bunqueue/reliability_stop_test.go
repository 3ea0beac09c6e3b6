package bunqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// Scenario 5: Stop under load. Two clients work a queue; in the middle of
// the run one stops gracefully (its items in flight finish) and the other
// with a context that has already ended (its items in flight are
// cancelled and released), at the same time. Once both Stops have
// returned, every item is finished or back in the queue: none is left
// locked or leased, and a new client finishes the rest.

// relLocked returns the keys of the rows of query (a SELECT of one
// column) that another transaction holds, by trying to lock each of
// them with NOWAIT in a READ COMMITTED transaction that is rolled back.
func relLocked(t *testing.T, db *bun.DB, query string, args ...any) []int64 {
	t.Helper()
	ctx := t.Context()
	var keys []int64
	require.NoError(t, db.NewRaw(query, args...).Scan(ctx, &keys))
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var locked []int64
	pg := isPG(db) // a failed statement aborts a PostgreSQL transaction: probe under a savepoint
	for _, k := range keys {
		if pg {
			_, err := tx.ExecContext(ctx, "SAVEPOINT probe")
			require.NoError(t, err)
		}
		var got []int64
		err := tx.NewRaw(query+" AND id = ? FOR UPDATE NOWAIT", append(args, k)...).Scan(ctx, &got)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			locked = append(locked, k)
			if pg {
				_, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT probe")
				require.NoError(t, err)
			}
		}
	}
	return locked
}

func TestReliabilityStopUnderLoad(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	for _, mode := range []string{"table", "lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			relStopUnderLoad(t, admin, mode)
		})
	}
}

func relStopUnderLoad(t *testing.T, admin *bun.DB, mode string) {
	items := relSize(400, 4000)
	in := faultdriver.NewInjector(rand.Uint64())
	w := newRelWorkload(t, admin, mode)
	w.work = 20 * time.Millisecond
	batch := 5
	if mode == "lease" {
		batch = 3
		w.lease = 10 * time.Second // a leftover lease would outlast the checks
	} else {
		// A Timeout that never fires: with one, a worker reads the server
		// session of each transaction, and the forced Stop ends those its
		// cancel caught in a statement, so that no row is locked when it
		// returns. Without one, such a row is released once the server
		// notices that its connection closed.
		w.timeout = time.Minute
	}
	// The injector injects nothing here.
	pool := func() *bun.DB { return relFaultDB(t, in, 0) }
	graceful := w.addClient(pool(), 4, 1, bunqueue.Config{}, nil)
	forced := w.addClient(pool(), 4, batch, bunqueue.Config{}, nil)
	rep := &relReport{Scenario: "Stop under load", Mode: w.modeName()}
	began := time.Now()
	require.NoError(t, w.produce(0, items))
	w.start()
	require.True(t, relWaitFor(time.Minute, func() bool { return w.remaining() <= items*3/4 }), "a quarter of the items done")

	var wg sync.WaitGroup
	var gracefulErr, forcedErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		gracefulErr = graceful.Stop(context.Background())
	}()
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithDeadline(context.Background(), time.Now())
		defer cancel()
		forcedErr = forced.Stop(ctx)
	}()
	wg.Wait()
	stopped := time.Now()
	require.NoError(t, gracefulErr, "the graceful Stop")
	require.ErrorIs(t, forcedErr, context.DeadlineExceeded, "the forced Stop")
	runsAtStop := len(w.rec.all())
	var unfinished int
	for _, r := range w.rec.all() {
		if r.End == 0 {
			unfinished++
		}
	}
	require.Zero(t, unfinished, "a handler still running after Stop returned")

	// Right after Stop: nothing locked, nothing leased.
	left := w.remaining()
	var locked []int64
	var lockedFor time.Duration
	switch mode {
	case "table":
		q := "SELECT id FROM bq_rel_item WHERE run = ?"
		locked = relLocked(t, admin, q, w.run)
		if len(locked) > 0 {
			relWaitFor(10*time.Second, func() bool { return len(relLocked(t, admin, q, w.run)) == 0 })
			lockedFor = time.Since(stopped)
		}
	default:
		q := "SELECT id FROM bunqueue_jobs WHERE queue = ?"
		locked = relLocked(t, admin, q, w.queue)
		if len(locked) > 0 {
			relWaitFor(10*time.Second, func() bool { return len(relLocked(t, admin, q, w.queue)) == 0 })
			lockedFor = time.Since(stopped)
		}
		leased := count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND lease_token IS NOT NULL", w.queue)
		require.Zero(t, leased, "jobs left leased")
		require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ? AND (attempts <> 0 OR run_at > "+nowSQL(admin)+")", w.queue),
			"a released job lost an attempt or is not runnable at once")
	}
	if mode != "lease" {
		// Lock modes: an unfinished item's effect was rolled back with it.
		switch mode {
		case "table":
			require.Zero(t, count(t, admin, "SELECT COUNT(*) FROM "+w.effects+" e JOIN bq_rel_item i ON i.id = e.item WHERE i.status = 'waiting'"),
				"an item back in the queue kept its effect")
		default:
			require.Equal(t, items-left, count(t, admin, "SELECT COUNT(DISTINCT item) FROM "+w.effects), "effects of the finished jobs only")
		}
	}
	rep.note("Stop returned with %d of %d items left, after %d runs", left, items, runsAtStop)
	if len(locked) > 0 {
		rep.note("%d rows were still locked right after the forced Stop returned, for %s", len(locked), lockedFor.Round(time.Millisecond))
	}

	// A new client finishes the rest.
	w.start2(w.addClient(pool(), 4, batch, bunqueue.Config{}, nil))
	drained := relWaitFor(time.Minute, func() bool { return w.remaining() == 0 })
	w.stop()
	rep.Duration = time.Since(began)
	require.True(t, drained, "the new client finished the rest (%d left)", w.remaining())
	w.check(rep, items, nil)
	require.Empty(t, locked, "rows still locked after Stop returned (released %s later)", lockedFor)
}
