package main

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// This file is the scenario of the batch-handler API (NewBatchQueue). It
// registers itself, so that the rest of the command builds without it.

func init() {
	batchFnScenario = &scenario{
		name: "table-batchfn-b50", desc: "any-table queue, BatchSize 50, a batch handler: one UPDATE … WHERE id IN (…) per batch", concurrency: workers,
		run: func(ctx context.Context, b *bench) (result, error) { return b.tableBatchFn(ctx, 50, 16) },
	}
}

// tableBatchFn runs an any-table queue over bench_items whose handler gets
// the whole locked batch and marks it sent with one statement.
func (b *bench) tableBatchFn(ctx context.Context, batch int, factor float64) (result, error) {
	n := b.backlog(factor)
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	if _, err := b.createItems(ctx, db, n); err != nil {
		return result{}, err
	}
	done := b.newTally()
	q := bunqueue.NewBatchQueue(itemsTable, b.itemsQuery,
		func(ctx context.Context, tx bun.Tx, items []benchItem) error {
			ids := make([]int64, len(items))
			for i := range items {
				ids[i] = items[i].ID
				done.ran(ids[i])
			}
			_, err := tx.NewUpdate().Model((*benchItem)(nil)).Set("status = 'sent'").Where("id IN (?)", bun.List(ids)).Exec(ctx)
			return err
		},
		&bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: batch})
	client, err := bunqueue.NewClient(db, b.config(bunqueue.Config{}))
	if err != nil {
		return result{}, err
	}
	if err := client.Add(q); err != nil {
		return result{}, err
	}
	w, err := b.runClient(ctx, client, &done.done, db)
	if err != nil {
		return result{}, err
	}
	return result{ItemsPerSec: w.rate, RSSKiB: w.rssKiB, Note: backlogNote(n, "rows pre-inserted", w.end >= int64(n))}, nil
}
