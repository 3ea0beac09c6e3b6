package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// txAttempts bounds how often one batch is retried after a deadlock or a
// lock wait timeout before the error is returned.
const txAttempts = 8

// batchResult is what one claim transaction did.
type batchResult struct {
	claimed  int      // rows locked by the claim
	got      []string // the ids of the rows locked by the claim
	done     int      // rows processed and committed
	itemErrs []error  // one *ItemError per failed row
	err      error    // what kept the batch from committing
	// oneByOne are rows to claim again one per transaction: the batch
	// handler's call timed out and took the transaction down with it.
	oneByOne []candidate
}

// runBatch claims the rows of keys that still wait and are not locked
// (with keys nil: up to limit rows at the head of the queue) and processes
// them in one transaction on s (nil: on the pool), retrying the whole transaction with jitter on
// deadlocks and lock wait timeouts.
func (q *Queue[T]) runBatch(ctx context.Context, s *session, limit int, keys []candidate) batchResult {
	var res batchResult
	_ = q.client.retry(ctx, func() error {
		res = q.tryBatch(ctx, s, limit, keys)
		return res.err
	}, metric.WithAttributes(semconv.MessagingDestinationName(q.name)))
	switch {
	case len(keys) > 1 && res.claimed == 0 && q.client.dialect.Local(errors.Unwrap(res.err)):
		// A row of the batch cannot be loaded into the model: claim the
		// keys one by one, so that it fails alone and the others run.
		return q.runOneByOne(ctx, s, keys, batchResult{})
	case res.oneByOne != nil:
		// The batch handler timed out and lost the transaction: run the
		// rows alone, so that the one that hangs fails alone.
		return q.runOneByOne(ctx, s, res.oneByOne, batchResult{claimed: res.claimed})
	}
	q.client.finishedBatch(q.name, res) // counts for Client.Stats
	return res
}

// runOneByOne claims and processes each of keys in a transaction of its
// own, adding up the results to all.
func (q *Queue[T]) runOneByOne(ctx context.Context, s *session, keys []candidate, all batchResult) batchResult {
	for _, k := range keys {
		r := q.runBatch(ctx, s, 1, []candidate{k})
		all.claimed += r.claimed
		all.got = append(all.got, r.got...)
		all.done += r.done
		all.itemErrs = append(all.itemErrs, r.itemErrs...)
		all.err = errors.Join(all.err, r.err)
	}
	return all
}

// retry runs fn, and runs it again after a deadlock or a lock wait timeout
// (the server has rolled the transaction back, or should be asked to),
// after a jittered exponential wait, up to txAttempts times in all. Each
// retry is counted in bunqueue.transaction.retries.
func (c *Client) retry(ctx context.Context, fn func() error, attrs ...metric.AddOption) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !c.dialect.Retryable(err) || attempt == txAttempts {
			return err
		}
		c.cfg.Logger.DebugContext(ctx, "bunqueue: retrying transaction", "attempt", attempt, "error", err)
		c.tel.txRetries.Add(ctx, 1, attrs...)
		if !sleep(ctx, backoff.Jitter(backoff.Exponential(attempt, 5*time.Millisecond, 500*time.Millisecond), 0.5)) {
			return err
		}
	}
}

// outcome of one item of a batch.
type outcome int

const (
	succeeded outcome = iota // handler returned nil
	recorded                 // handler failed, OnError recorded it
	released                 // handler failed, nothing recorded: row goes back
)

func (q *Queue[T]) tryBatch(ctx context.Context, s *session, limit int, keys []candidate) (res batchResult) {
	tel := q.client.tel
	ctx, batchSpan := tel.startBatch(ctx, q.name)
	var spans []*itemSpan
	defer func() {
		for _, it := range spans {
			if res.err != nil {
				// The batch did not commit: every row is back as it was.
				it.outcome = outcomeReleased
				if it.err == nil {
					it.err = res.err
				}
			}
			tel.end(it)
		}
		tel.endSpan(batchSpan, res.err)
	}()
	began := time.Now()
	tx, err := s.begin(ctx, q.client.db)
	if err != nil {
		res.err = fmt.Errorf("bunqueue: queue %q: begin: %w", q.name, err)
		return res
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()

	sessionID, err := q.sessionID(ctx, s, tx)
	if err != nil {
		res.err = fmt.Errorf("bunqueue: queue %q: %w", q.name, err)
		return res
	}
	// lost ends a batch whose transaction a handler's timeout took down:
	// every row is back in the queue as it was.
	lost := func() {
		_ = tx.Rollback()
		committed = true
		if s != nil {
			s.end()
		}
		for _, it := range spans {
			it.outcome = outcomeReleased
		}
	}

	prep := s != nil && q.prepares // prepared statements serve the workers, from Start to Stop
	items, err := q.claim(ctx, tx, prep, limit, keys)
	if err != nil {
		res.err = fmt.Errorf("bunqueue: queue %q: claim: %w", q.name, err)
		if len(keys) == 1 && q.client.dialect.Local(err) {
			// The row cannot be loaded into the model (a value that does
			// not fit it): its failure, not the batch's.
			res.err = nil
			k := keys[0]
			res.itemErrs = append(res.itemErrs, &ItemError{Queue: q.name, Key: k.id,
				Err:      fmt.Errorf("the row cannot be loaded into the model: %w", err),
				Cooldown: q.cool.Add(k.id, k.vals, time.Now())})
		}
		return res
	}
	res.claimed = len(items)
	res.got = make([]string, len(items))
	for i := range items {
		_, res.got[i] = q.key(&items[i])
	}
	tel.claimed(ctx, batchSpan, q.name, len(items), began)
	if len(items) == 0 {
		return res
	}

	// Each row runs in its own savepoint when a failure must be undone
	// while the others' writes (or the row's lock, for OnError) are kept.
	// A lone row without OnError needs none: a failure rolls back it all.
	withSavepoints := len(items) > 1 || q.cfg.OnError != nil
	outcomes := make([]outcome, len(items))
	causes := make([]error, len(items))
	whole := false // a batch handler took all the items at once
	if q.batch != nil && len(items) > 1 {
		whole, spans, res.err = q.runWhole(ctx, tx, batchSpan, items)
		if errors.As(res.err, new(*lostTxError)) {
			lost()
			batchSpan.AddEvent("the batch handler timed out and its transaction was lost: running its rows one by one")
			q.endLost(ctx, sessionID, items)
			res.err = nil
			res.oneByOne = make([]candidate, len(items))
			for i := range items {
				res.oneByOne[i].vals, res.oneByOne[i].id = q.key(&items[i])
			}
			return res
		}
		if res.err != nil {
			return res
		}
	}
	for i := range items {
		if whole {
			break
		}
		if withSavepoints {
			if err := q.exec(ctx, tx, "SAVEPOINT", i); err != nil {
				res.err = err
				return res
			}
		}
		claimed := items[i]
		it := q.startItemSpan(ctx, batchSpan, &items[i], len(items))
		spans = append(spans, it)
		herr := q.call(it.ctx, tx, func(ctx context.Context) error {
			return q.hooks.run(ctx, func() *WorkInfo { return q.workInfo(&items[i]) },
				func() error { return q.handler(ctx, tx, &items[i]) })
		})
		if herr == nil {
			continue
		}
		it.err = herr
		if errors.As(herr, new(*lostTxError)) {
			lost()
			ie := q.failLost(ctx, sessionID, []T{claimed}, herr)[0].(*ItemError)
			if ie.Recorded {
				it.outcome = q.failureOutcome(&claimed, herr)
			}
			res.itemErrs = append(res.itemErrs, ie)
			return res
		}
		if q.client.dialect.Retryable(herr) || ctx.Err() != nil {
			// The server may have rolled back the whole transaction
			// (deadlock), or we are stopping: retry or release the batch.
			res.err = fmt.Errorf("bunqueue: queue %q: handler: %w", q.name, herr)
			return res
		}
		if !withSavepoints {
			_ = tx.Rollback()
			committed = true // nothing left to roll back
			it.outcome = outcomeReleased
			key, id := q.key(&claimed)
			res.itemErrs = append(res.itemErrs, &ItemError{Queue: q.name, Key: id, Err: herr, Cooldown: q.cool.Add(id, key, time.Now())})
			return res
		}
		if err := q.exec(ctx, tx, "ROLLBACK TO SAVEPOINT", i); err != nil {
			res.err = err
			return res
		}
		outcomes[i], causes[i] = released, herr
		if q.cfg.OnError == nil {
			continue
		}
		if oerr := callHandler(func() error { return q.cfg.OnError(ctx, tx, &claimed, herr) }); oerr != nil {
			if q.client.dialect.Retryable(oerr) || ctx.Err() != nil {
				res.err = fmt.Errorf("bunqueue: queue %q: OnError: %w", q.name, oerr)
				return res
			}
			if err := q.exec(ctx, tx, "ROLLBACK TO SAVEPOINT", i); err != nil {
				res.err = err
				return res
			}
			causes[i] = fmt.Errorf("%w; OnError failed too: %w", herr, oerr)
			continue
		}
		outcomes[i] = recorded
	}

	still, err := q.stillQueued(ctx, tx, prep, items, outcomes)
	if err != nil {
		res.err = err
		return res
	}
	// A row whose handler succeeded but that is still in the queue breaks
	// the rule: undo its writes. Savepoints nest, so rolling back to its
	// savepoint also undoes the items after it; those return to the queue.
	firstBad := -1
	for i := range items {
		if outcomes[i] == succeeded && still[i] {
			firstBad = i
			break
		}
	}
	if firstBad >= 0 {
		switch {
		case whole:
			// The batch handler's writes cannot be told apart: undo them
			// all; the other rows return to the queue too.
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT bunqueue_batch"); err != nil {
				res.err = fmt.Errorf("bunqueue: queue %q: ROLLBACK TO SAVEPOINT: %w", q.name, err)
				return res
			}
			firstBad = 0
		case withSavepoints:
			if err := q.exec(ctx, tx, "ROLLBACK TO SAVEPOINT", firstBad); err != nil {
				res.err = err
				return res
			}
		default:
			_ = tx.Rollback()
			committed = true
		}
	}

	now := time.Now()
	var succeededKeys []string
	var completed []*T
	for i := range items {
		id := res.got[i]
		undone := firstBad >= 0 && i >= firstBad
		ie := &ItemError{Queue: q.name, Key: id, Err: causes[i]}
		it := spans[i]
		it.outcome = outcomeReleased
		switch {
		case outcomes[i] == succeeded && still[i]:
			ie.Err = ErrStillQueued
			it.err = ErrStillQueued
		case outcomes[i] == succeeded && undone:
			continue // undone with a row before it; back in the queue as it was
		case outcomes[i] == succeeded:
			it.outcome = outcomeCompleted
			succeededKeys = append(succeededKeys, id)
			completed = append(completed, &items[i])
			continue
		case outcomes[i] == recorded && !undone && !still[i]:
			ie.Recorded = true
			it.outcome = q.failureOutcome(&items[i], causes[i])
			res.itemErrs = append(res.itemErrs, ie)
			continue
		case outcomes[i] == recorded && !undone:
			ie.Recorded = true
			ie.Err = fmt.Errorf("%w (recorded by OnError, but the row still matches the queue query)", causes[i])
			it.outcome = outcomeFailed
		}
		key, _ := q.key(&items[i])
		ie.Cooldown = q.cool.Add(id, key, now)
		res.itemErrs = append(res.itemErrs, ie)
	}

	if q.complete != nil && len(completed) > 0 && !committed {
		if err := q.complete(ctx, tx, prep, completed); err != nil {
			res.err = fmt.Errorf("bunqueue: queue %q: complete: %w", q.name, err)
			return res
		}
	}
	if !committed {
		if err := tx.Commit(); err != nil {
			committed = true // database/sql has ended the transaction either way
			res.err = fmt.Errorf("bunqueue: queue %q: commit: %w", q.name, err)
			return res
		}
		committed = true
	}
	for _, id := range succeededKeys {
		q.cool.Forget(id)
	}
	res.done = len(succeededKeys)
	return res
}

// runWhole calls the batch handler on all items, in a savepoint. It
// reports whether they succeeded, with their spans (one process span for
// the batch, linked to each item's creation context). After any other
// failure it has rolled back to the savepoint, keeping the locks, so that
// the items can run one by one; err is what must end the transaction.
func (q *Queue[T]) runWhole(ctx context.Context, tx bun.Tx, batchSpan trace.Span, items []T) (bool, []*itemSpan, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT bunqueue_batch"); err != nil {
		return false, nil, fmt.Errorf("bunqueue: queue %q: SAVEPOINT: %w", q.name, err)
	}
	spans := make([]*itemSpan, len(items))
	for i := range items {
		spans[i] = q.startItemSpan(ctx, batchSpan, &items[i], 0)
	}
	herr := q.call(ctx, tx, func(ctx context.Context) error {
		return q.hooks.run(ctx, func() *WorkInfo { return q.batchInfo(items) },
			func() error { return q.batch(ctx, tx, items) })
	})
	switch {
	case herr == nil:
		return true, spans, nil
	case errors.As(herr, new(*lostTxError)):
		return false, spans, herr
	case q.client.dialect.Retryable(herr) || ctx.Err() != nil:
		return false, nil, fmt.Errorf("bunqueue: queue %q: batch handler: %w", q.name, herr)
	}
	batchSpan.AddEvent("the batch handler failed: running its rows one by one",
		trace.WithAttributes(semconv.ErrorTypeKey.String(errorType(herr)), attribute.String("exception.message", herr.Error())))
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT bunqueue_batch"); err != nil {
		return false, nil, fmt.Errorf("bunqueue: queue %q: ROLLBACK TO SAVEPOINT: %w", q.name, err)
	}
	return false, nil, nil
}

// claim locks the rows of keys that still match the queue's query,
// skipping locked ones. When some are gone (another process took them
// between the feed's read and now) it tops the batch up from the head of
// the queue, so that workers of several processes reading the same rows
// do not come away empty. With keys nil it claims up to limit rows at the
// head of the queue. With prep, the claim of one key runs as a prepared
// statement once there is one.
func (q *Queue[T]) claim(ctx context.Context, tx bun.Tx, prep bool, limit int, keys []candidate) ([]T, error) {
	items := make([]T, 0, max(limit, len(keys)))
	ok := false
	if prep && len(keys) == 1 {
		var err error
		if items, ok, err = q.claimOne(ctx, tx, keys[0]); err != nil {
			return nil, err
		}
	}
	if keys != nil && !ok {
		// FORCE INDEX: a claim that walked another index would lock, for
		// a moment, rows that other workers are about to claim, and make
		// them skip those.
		sel := q.onlyKeys(q.query(q.byKey(tx.NewSelect().Model(&items))), keys).Limit(int64(len(keys)))
		if err := sqldialect.Locking(sel, q.client.dialect.SkipLocked()).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	if keys != nil {
		if len(items) == len(keys) {
			return items, nil
		}
		limit = len(keys) - len(items)
	}
	more := make([]T, 0, limit)
	sel := q.excludeCooling(q.query(tx.NewSelect().Model(&more)).Limit(int64(limit)), time.Now())
	if len(items) > 0 {
		// Rows this transaction holds are not skipped: leave them out.
		got := make([]candidate, len(items))
		for i := range items {
			got[i].vals, got[i].id = q.key(&items[i])
		}
		sel = q.exceptKeys(sel, got)
	}
	if err := sqldialect.Locking(sel, q.client.dialect.SkipLocked()).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		if keys != nil && q.client.dialect.Local(err) {
			// A row at the head cannot be loaded into the model: the feed
			// hands it out by key, where it fails alone.
			return items, nil
		}
		return nil, err
	}
	return append(items, more...), nil
}

// byKey makes sel read the table by its primary key, where the dialect
// can say so and the model's key is the table's primary key.
func (q *Queue[T]) byKey(sel *bun.SelectQuery) *bun.SelectQuery {
	if hint := q.client.dialect.ForcePrimary(); q.byPrimary && hint != "" {
		return sel.ModelTableExpr("?TableName AS ?TableAlias " + hint)
	}
	return sel
}

// stillQueued re-checks, with one query in tx, which of the items whose
// outcome is succeeded or recorded still match the queue's query. With
// prep, the re-check of one row runs as a prepared statement once there
// is one.
func (q *Queue[T]) stillQueued(ctx context.Context, tx bun.Tx, prep bool, items []T, outcomes []outcome) ([]bool, error) {
	still := make([]bool, len(items))
	if q.trusted {
		return still, nil
	}
	probe := make([]T, 0, len(items))
	index := map[string]int{}
	for i := range items {
		if outcomes[i] == released {
			continue
		}
		probe = append(probe, items[i])
		_, id := q.key(&items[i])
		index[id] = i
	}
	if len(probe) == 0 {
		return still, nil
	}
	if prep && len(probe) == 1 {
		one, ok, err := q.recheckOne(ctx, tx, &probe[0])
		if err != nil {
			return nil, fmt.Errorf("bunqueue: queue %q: re-check that processed rows left the queue: %w", q.name, err)
		}
		if ok {
			_, id := q.key(&probe[0])
			still[index[id]] = one
			return still, nil
		}
	}
	// By primary key: on the queue's own index, the rows the handlers
	// just took out of the queue are entries that this transaction
	// delete-marked, and the server reads through every older version of
	// them. Measured on MariaDB 10.11 with 50 rows during a run: 9,000 to
	// 64,000 pages read on the queue's index, 150 by primary key.
	err := q.query(q.byKey(tx.NewSelect().Model(&probe))).
		Column(q.pkNames()...).
		WherePK().
		Limit(int64(len(probe))).
		Scan(ctx)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("bunqueue: queue %q: re-check that processed rows left the queue: %w", q.name, err)
	}
	for i := range probe {
		_, id := q.key(&probe[i])
		if j, ok := index[id]; ok {
			still[j] = true
		}
	}
	return still, nil
}

// exec runs a savepoint statement for item i.
func (q *Queue[T]) exec(ctx context.Context, tx bun.Tx, stmt string, i int) error {
	if _, err := tx.ExecContext(ctx, stmt+" bunqueue_"+strconv.Itoa(i)); err != nil {
		return fmt.Errorf("bunqueue: queue %q: %s: %w", q.name, stmt, err)
	}
	return nil
}

// callHandler runs fn, turning a panic into a *PanicError.
func callHandler(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
