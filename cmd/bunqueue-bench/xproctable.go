package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/pgxlisten"
)

// childRows inserts rows into bench_items at perSecond, each in a
// transaction of its own that calls Client.Notify for the table queue,
// and reports when each measured one was called and returned, by id.
func (b *bench) childRows(ctx context.Context, perSecond int) (childReport, error) {
	db, err := b.open(ctx, 4)
	if err != nil {
		return childReport{}, err
	}
	defer db.Close()
	client, err := bunqueue.NewClient(db, b.config(bunqueue.Config{}))
	if err != nil {
		return childReport{}, err
	}
	called, returned := map[int64]int64{}, map[int64]int64{}
	p, err := b.produce(ctx, perSecond, false, func(ctx context.Context, job latencyJob) error {
		item := &benchItem{Status: "waiting"}
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(item).Exec(ctx); err != nil {
				return err
			}
			return client.Notify(ctx, tx, itemsTable)
		})
		if err == nil && job.Measured {
			called[item.ID], returned[item.ID] = job.EnqueuedAt.UnixNano(), time.Now().UnixNano()
		}
		return err
	})
	if err != nil {
		return childReport{}, err
	}
	rep := p.report()
	rep.Called, rep.Returned = called, returned
	return rep, nil
}

// rowStarts records when each row of bench_items first started.
type rowStarts struct {
	mu      sync.Mutex
	at      map[int64]time.Time
	started atomic.Int64
}

// latencyTableNotify is latency-xproc-notify for an any-table queue: a
// child process inserts rows into bench_items at perSecond, each in its
// own transaction, which calls Client.Notify (so that its commit
// delivers the notification), and this process's table queue over
// bench_items (16 workers, one row per transaction), whose client
// listens, records when each started.
func (b *bench) latencyTableNotify(ctx context.Context, perSecond int) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	if _, err := b.createItems(ctx, db, 0); err != nil {
		return result{}, err
	}
	l, err := pgxlisten.New(b.dsn)
	if err != nil {
		return result{}, err
	}
	clock := &wakeClock{next: l, kind: "rows", queue: itemsTable}
	client, err := bunqueue.NewClient(db, b.config(bunqueue.Config{Listener: clock}))
	if err != nil {
		return result{}, err
	}
	runs := b.newTally()
	starts := &rowStarts{at: map[int64]time.Time{}}
	q := bunqueue.NewQueue(itemsTable, b.itemsQuery, func(ctx context.Context, tx bun.Tx, item *benchItem) error {
		now := time.Now()
		if runs.ran(item.ID) {
			starts.mu.Lock()
			starts.at[item.ID] = now
			starts.mu.Unlock()
			starts.started.Add(1)
		}
		_, err := tx.NewUpdate().Model(item).Set("status = 'sent'").WherePK().Exec(ctx)
		return err
	}, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: 1})
	if err := client.Add(q); err != nil {
		return result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	rep, err := b.runProducer(ctx, "rows", perSecond)
	if err == nil {
		b.scene.addChild(rep)
		for deadline := time.Now().Add(bunqueue.PollIntervalDefault + 2*time.Second); starts.started.Load() < rep.Enqueued && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	rss := readRSS()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := client.Stop(stopCtx); err == nil && serr != nil {
		err = fmt.Errorf("stop the client: %w", serr)
	}
	if err != nil {
		return result{}, err
	}
	if rep.InWindow < 2 || rep.EnqueueP50ms == nil {
		return result{}, errors.New("the child inserted fewer than 2 rows during the measured window")
	}
	starts.mu.Lock()
	var lat, fromReturn []time.Duration
	for id, c := range rep.Called {
		if s, ok := starts.at[id]; ok {
			lat = append(lat, s.Sub(time.Unix(0, c)))
			fromReturn = append(fromReturn, s.Sub(time.Unix(0, rep.Returned[id])))
		}
	}
	starts.mu.Unlock()
	note := fmt.Sprintf("a child process inserted %d rows in the window (%.0f/s, each INSERT and Client.Notify in a transaction of its own, which took p50 %.2f ms, p99 %.2f ms), %d started here",
		rep.InWindow, float64(rep.InWindow)/rep.WindowS, *rep.EnqueueP50ms, *rep.EnqueueP99ms, len(lat))
	r, err := latencyResult(lat, rep.InWindow, time.Duration(rep.WindowS*float64(time.Second)), rss, note)
	if err != nil {
		return result{}, err
	}
	if p50, p99 := percentile(fromReturn, 0.5), percentile(fromReturn, 0.99); p50 != nil {
		r.Note += fmt.Sprintf("; from the commit p50 %.2f ms, p99 %.2f ms", *p50, *p99)
	}
	r.Note += notifyNote(r, clock, nil)
	return r, nil
}
