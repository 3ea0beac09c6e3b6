package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// burstLimit bounds the processing of a post-burst scenario's burst: past
// it, the scenario measures anyway and says the burst was cut short.
const burstLimit = 2 * time.Minute

// heldBurstMax caps the burst of post-burst-held: with purge held back,
// each claim of the burst itself walks past more delete-marked entries, so
// the burst slows down as it goes (200,000 rows did not finish in 3
// minutes here).
const heldBurstMax = 30_000

// backlogLarge runs the table-b1 scenario on b.large waiting rows.
func (b *bench) backlogLarge(ctx context.Context) (result, error) {
	n := b.large
	st, err := b.runTable(ctx, tableRun{rows: n, cfg: &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1}})
	if err != nil {
		return result{}, err
	}
	note := fmt.Sprintf("BatchSize 1, %s (inserted in %.1f s)", st.note(n), st.fill.Seconds())
	if n != largeFull {
		note += fmt.Sprintf(" [not %d: --large]", largeFull)
	}
	note += b.versus(st.rate, "of", "", "table-b1")
	return result{ItemsPerSec: st.rate, RSSKiB: st.rssKiB, Note: note}, nil
}

// holdPurge opens a transaction with a consistent snapshot on a
// connection of its own, as a long report or a backup would: until the
// returned release is called, purge (InnoDB) or vacuum (PostgreSQL) keeps
// every index entry and row version made obsolete after it.
func (b *bench) holdPurge(ctx context.Context, db *bun.DB) (release func(), err error) {
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	for _, stmt := range b.sql.snapshot() {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("open a read view: %w", err)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			_ = conn.Close()
		})
	}, nil
}

// runBurst starts client, waits until done reaches n or burstLimit passes,
// and stops the client; if hold, a read view holds back purge meanwhile. It
// returns how long it took, whether the burst was cut short, and the
// release of the read view (a no-op if !hold), for the caller to call once
// it is ready to measure.
func (b *bench) runBurst(ctx context.Context, db *bun.DB, client *bunqueue.Client, done *atomic.Int64, n int, hold bool) (took time.Duration, short bool, release func(), err error) {
	release = func() {}
	if hold {
		if release, err = b.holdPurge(ctx, db); err != nil {
			return 0, false, nil, err
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	took, short, err = b.burstOnce(ctx, client, done, n)
	return took, short, release, err
}

func (b *bench) burstOnce(ctx context.Context, client *bunqueue.Client, done *atomic.Int64, n int) (time.Duration, bool, error) {
	began := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, false, err
	}
	short := false
	for done.Load() < int64(n) {
		if time.Since(began) > burstLimit {
			short = true
			break
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return 0, false, err
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return 0, false, fmt.Errorf("stop the burst's client: %w", err)
	}
	return time.Since(began), short, nil
}

// burstNote describes the burst of n items (fullSize without --quick or
// --burst).
func (b *bench) burstNote(n, fullSize int, what string, took time.Duration, short bool, done int64, hold bool) string {
	s := fmt.Sprintf("after a burst of %d %s at BatchSize 50 (%.1f s, %.0f/s)", n, what, took.Seconds(), float64(done)/took.Seconds())
	if short {
		s += fmt.Sprintf(" CUT SHORT after %s at %d", burstLimit, done)
	}
	if n != fullSize {
		s += fmt.Sprintf(" [not %d: --quick or --burst]", fullSize)
	}
	if hold {
		s += ", during which " + b.sql.heldBy() + " held back " + b.sql.cleaner() + "; released as the window began"
	} else {
		s += ", " + b.sql.cleaner() + " free to run"
	}
	return s
}

// postBurstTable processes a burst of b.burst rows of bench_items with the
// table-b50 settings (each processed row's status index entry is
// delete-marked, and stays until purge removes it), then measures at once,
// without a warm-up, the table-b1 settings on the rows behind the burst.
func (b *bench) postBurstTable(ctx context.Context) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	m := b.backlog(3)
	if _, err := b.createItems(ctx, db, b.burst+m); err != nil {
		return result{}, err
	}

	burstDone := b.newTally()
	c1, err := bunqueue.NewClient(db, b.config(bunqueue.Config{}))
	if err != nil {
		return result{}, err
	}
	if err := c1.Add(b.itemsQueue(burstDone, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 50})); err != nil {
		return result{}, err
	}
	took, short, _, err := b.runBurst(ctx, db, c1, &burstDone.done, b.burst, false)
	if err != nil {
		return result{}, err
	}

	done := b.newTally()
	c2, err := bunqueue.NewClient(db, b.config(bunqueue.Config{}))
	if err != nil {
		return result{}, err
	}
	if err := c2.Add(b.itemsQueue(done, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1})); err != nil {
		return result{}, err
	}
	h0, ok0 := b.sql.garbage(ctx, db, itemsTable)
	w, err := b.runClientWith(ctx, c2, &done.done, db, b.measureNow)
	if err != nil {
		return result{}, err
	}
	h1, ok1 := b.sql.garbage(ctx, db, itemsTable)
	left := m - int(burstDone.done.Load()-int64(b.burst))
	note := fmt.Sprintf("BatchSize 1, no warm-up, %s; first second %.0f/s; %s; %s",
		b.burstNote(b.burst, burstFull, "rows", took, short, burstDone.done.Load(), false), w.first,
		b.sql.garbageNote(itemsTable, h0, h1, ok0 && ok1), backlogNote(left, "rows behind the burst", w.end >= int64(left)))
	note += b.versus(w.rate, "of", "", "table-b1")
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: note}, nil
}

// postBurstJobs processes a burst of n jobs with the jobs-lock-b50
// settings (each completed job is deleted: its index entries are
// delete-marked until purge removes them), then measures at once, without
// a warm-up, the jobs-lock-b1 settings on the jobs behind the burst. If
// hold, a read view holds back purge until the window begins.
func (b *bench) postBurstJobs(ctx context.Context, n, fullSize int, hold bool) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const queue = "bench_burst"
	c1, cleanup, err := b.jobsClient(ctx, db, queue, bunqueue.JobQueueConfig{Workers: workers, BatchSize: 50})
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	burstDone := b.newTally()
	if err := bunqueue.AddWorker(c1, countingWorker(burstDone)); err != nil {
		return result{}, err
	}
	m := b.backlog(2)
	if err := enqueueBacklog(ctx, c1, db, queue, n+m); err != nil {
		return result{}, err
	}
	if err := b.analyze(ctx, db, jobsTable); err != nil {
		return result{}, err
	}
	took, short, release, err := b.runBurst(ctx, db, c1, &burstDone.done, n, hold)
	if err != nil {
		return result{}, err
	}
	defer release()

	done := b.newTally()
	c2, err := bunqueue.NewClient(db, b.config(bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: workers, BatchSize: 1}},
	}))
	if err != nil {
		return result{}, err
	}
	if err := bunqueue.AddWorker(c2, countingWorker(done)); err != nil {
		return result{}, err
	}
	h0, ok0 := b.sql.garbage(ctx, db, jobsTable)
	release() // purge may start now, while the window runs
	w, err := b.runClientWith(ctx, c2, &done.done, db, b.measureNow)
	if err != nil {
		return result{}, err
	}
	h1, ok1 := b.sql.garbage(ctx, db, jobsTable)
	left := m - int(burstDone.done.Load()-int64(n))
	note := fmt.Sprintf("lock mode, BatchSize 1, no warm-up, %s; first second %.0f/s; %s; %s",
		b.burstNote(n, fullSize, "jobs (deleted as they completed)", took, short, burstDone.done.Load(), hold), w.first,
		b.sql.garbageNote(jobsTable, h0, h1, ok0 && ok1), backlogNote(left, "jobs behind the burst", w.end >= int64(left)))
	note += b.versus(w.rate, "of", "", "jobs-lock-b1")
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: note}, nil
}
