package bunqueue

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// finishTimeout bounds the writes that complete, fail or release a job;
// they run even when the job's context was cancelled.
const finishTimeout = 30 * time.Second

// errLeaseExpired is the error kept for a job whose last attempt's lease
// ran out: its worker stopped without finishing it.
var errLeaseExpired = errors.New("bunqueue: the lease of the job's last attempt expired: its worker stopped (crash, kill, lost connection) without finishing it")

// leaseRunner runs one jobs queue in lease mode.
type leaseRunner struct {
	c     *Client
	jobs  *Queue[jobRow] // its claims: a queue over the jobs table
	queue string
	cfg   JobQueueConfig
	hooks hooks
}

// run leases the jobs of keys that are still waiting and not locked (with
// keys nil: up to limit jobs at the head of the queue) in a short
// transaction, then runs them one after the other outside any
// transaction, keeping their leases alive.
//
// It does not use the worker's session: a lease-mode job holds no
// connection while it runs.
func (l *leaseRunner) run(ctx context.Context, _ *session, limit int, keys []candidate) batchResult {
	var res batchResult
	var rows []jobRow
	var token string
	var claimed time.Time
	began := time.Now()
	err := l.c.retry(ctx, func() (err error) {
		// Taken before the claim's UPDATE sets the leases from the database
		// clock: they end no earlier than claimed + Lease.
		claimed = time.Now()
		rows, token, err = l.claim(ctx, limit, keys, &res)
		return err
	})
	l.c.tel.claimDuration.Record(ctx, time.Since(began).Seconds(), metric.WithAttributes(semconv.MessagingDestinationName(l.queue)))
	if err != nil {
		res.err = fmt.Errorf("bunqueue: queue %q: lease: %w", l.queue, err)
		return res
	}
	res.got = make([]string, len(rows))
	for i := range rows {
		_, res.got[i] = l.jobs.key(&rows[i])
	}
	if len(rows) == 0 {
		return res
	}
	keeper := newLeaseKeeper(l, rows, token, claimed)
	go keeper.beat(ctx)
	defer keeper.stop()
	for i := range rows {
		if ierr := l.runOne(ctx, keeper, &rows[i], token); ierr != nil {
			res.itemErrs = append(res.itemErrs, ierr)
		} else {
			res.done++
		}
	}
	return res
}

// claim locks waiting jobs, moves those whose last attempt's lease expired
// to the failed jobs, and leases the others with a fresh token.
//
// The transaction does not end with ctx: a driver that sends COMMIT under
// a context that Stop cancels (pgx does) reports an error after the server
// may have committed, and the jobs would stay leased, not run, until their
// leases ran out. The caller releases what it claimed if ctx has ended.
func (l *leaseRunner) claim(ctx context.Context, limit int, keys []candidate, res *batchResult) ([]jobRow, string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	tx, err := l.c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := l.jobs.claim(ctx, tx, l.jobs.prepares, limit, keys) // from a worker: prepared statements serve it
	if err != nil {
		return nil, "", err
	}
	res.claimed = len(rows)
	live := rows[:0]
	var ids []int64
	var expired []error
	for _, r := range rows {
		if r.Attempts >= r.MaxAttempts {
			if _, err := l.c.failJob(ctx, tx, &r, r.Attempts, errLeaseExpired, ""); err != nil {
				return nil, "", err
			}
			expired = append(expired, &ItemError{Queue: l.queue, Key: fmt.Sprintf("id=%d", r.ID), Err: errLeaseExpired, Recorded: true})
			continue
		}
		r.Attempts++
		live = append(live, r)
		ids = append(ids, r.ID)
	}
	token := newToken()
	if len(ids) > 0 {
		if _, err := tx.NewRaw("UPDATE bunqueue_jobs SET attempts = attempts + 1, lease_token = ?, run_at = "+l.c.dialect.NowPlus(l.cfg.Lease)+" WHERE id IN (?)",
			token, bun.List(ids)).Exec(ctx); err != nil {
			return nil, "", err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, "", err
	}
	res.itemErrs = append(res.itemErrs, expired...)
	return live, token, nil
}

// runOne runs one leased job and completes, fails or releases it, if the
// lease is still this worker's.
func (l *leaseRunner) runOne(ctx context.Context, keeper *leaseKeeper, row *jobRow, token string) (ierr error) {
	key := fmt.Sprintf("id=%d", row.ID)
	itemErr := func(err error) error { return &ItemError{Queue: l.queue, Key: key, Err: err} }
	defer func() { l.c.finishedJob(l.queue, ierr) }() // counts for Client.Stats

	tel := l.c.tel
	sctx, span := tel.startBatch(ctx, l.queue)
	it := tel.startItem(sctx, span, l.queue, 1, strconv.FormatInt(row.ID, 10), tel.extract(row.TraceContext),
		AttrKind.String(row.Kind), AttrAttempt.Int(row.Attempts))
	it.outcome = outcomeReleased
	defer func() {
		if ierr != nil && it.err == nil {
			it.err = ierr
		}
		tel.end(it)
		tel.endSpan(span, nil)
	}()

	jctx, cancel := withTimeout(it.ctx, l.cfg.Timeout)
	defer cancel()
	var err error
	switch run := l.c.kinds[row.Kind]; {
	case ctx.Err() != nil:
		// Stopping before the job's turn came: give it back (below)
		// without starting it.
		err = ctx.Err()
	case !keeper.start(row.ID, cancel):
		return itemErr(errors.New("bunqueue: the job's lease was lost before it started; another worker may hold it now"))
	default:
		err = l.hooks.run(jctx, func() *WorkInfo { return row.workInfo(row.Attempts) }, func() error {
			if run == nil {
				return errNoWorker(row.Kind)
			}
			return run(jctx, l.c.db, row, row.Attempts)
		})
	}
	lost := keeper.finish(row.ID)

	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer fcancel()
	var changed bool
	var ferr error
	switch {
	case err == nil:
		ferr = l.c.retry(fctx, func() (err error) {
			changed, err = l.c.completeJob(fctx, l.c.db, row.ID, token)
			return err
		})
		if ferr == nil && changed {
			it.outcome = outcomeCompleted
			return nil
		}
	case ctx.Err() != nil:
		// Stopping: give the job back at once, without using the attempt.
		changed, ferr = affected(l.c.db.NewRaw("UPDATE bunqueue_jobs SET attempts = attempts - 1, lease_token = NULL, run_at = "+l.c.dialect.Now()+" WHERE id = ? AND lease_token = ?",
			row.ID, token).Exec(fctx))
		if ferr == nil && changed {
			return itemErr(fmt.Errorf("bunqueue: released on stop: %w", ctx.Err()))
		}
	default:
		cause := err
		ferr = l.c.retry(fctx, func() error {
			return l.c.db.RunInTx(fctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) (err error) {
				changed, err = l.c.failJob(ctx, tx, row, row.Attempts, cause, token)
				return err
			})
		})
		if ferr == nil && changed {
			it.outcome, it.err = failOutcome(cause, row.Attempts, row.MaxAttempts), cause
			return &ItemError{Queue: l.queue, Key: key, Err: cause, Recorded: true}
		}
	}
	if ferr != nil {
		return itemErr(fmt.Errorf("bunqueue: finishing the job failed (its lease will expire and it will run again): %w (job result: %v)", ferr, err))
	}
	why := "the lease expired"
	if lost {
		why = "the lease was lost"
	}
	return itemErr(fmt.Errorf("bunqueue: %s before the job finished; another worker may hold it, so this result was not recorded (job result: %v)", why, err))
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leaseKeeper extends the leases of a batch while its jobs wait and run,
// and cancels a running job when its lease can no longer be vouched for.
type leaseKeeper struct {
	l     *leaseRunner
	token string
	done  chan struct{}
	wg    sync.WaitGroup

	mu         sync.Mutex
	held       map[int64]bool // jobs still leased by this batch
	lost       map[int64]bool
	running    int64
	cancel     context.CancelFunc
	validUntil time.Time // local clock: the leases are good until then
}

func newLeaseKeeper(l *leaseRunner, rows []jobRow, token string, claimed time.Time) *leaseKeeper {
	k := &leaseKeeper{l: l, token: token, done: make(chan struct{}), held: map[int64]bool{}, lost: map[int64]bool{}}
	for _, r := range rows {
		k.held[r.ID] = true
	}
	// The claim's UPDATE ran after claimed: the leases end at least this
	// late.
	k.validUntil = claimed.Add(l.cfg.Lease - leaseMargin(l.cfg.Lease))
	k.wg.Add(1)
	return k
}

// start marks the job as running; it reports false if its lease is gone.
func (k *leaseKeeper) start(id int64, cancel context.CancelFunc) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.held[id] || time.Now().After(k.validUntil) {
		return false
	}
	k.running, k.cancel = id, cancel
	return true
}

// finish marks the job as no longer running nor kept alive; it reports
// whether its lease was known to be lost.
func (k *leaseKeeper) finish(id int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running, k.cancel = 0, nil
	delete(k.held, id)
	return k.lost[id] || time.Now().After(k.validUntil)
}

func (k *leaseKeeper) stop() {
	close(k.done)
	k.wg.Wait()
}

// beat extends the batch's leases every Lease/3, and cancels the running
// job when its lease is lost or about to end unextended.
func (k *leaseKeeper) beat(ctx context.Context) {
	defer k.wg.Done()
	lease := k.l.cfg.Lease
	next := time.Now().Add(lease / 3)
	var passed time.Time // the deadline already acted on
	for {
		k.mu.Lock()
		deadline := k.validUntil
		k.mu.Unlock()
		wake := time.Until(next)
		if !deadline.Equal(passed) {
			wake = min(wake, time.Until(deadline))
		}
		t := time.NewTimer(max(wake, 0))
		select {
		case <-k.done:
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			passed = deadline
			k.mu.Lock()
			if k.cancel != nil {
				k.cancel() // cannot vouch for the lease any more
			}
			k.mu.Unlock()
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(lease / 3)
		k.extend(ctx)
	}
}

// extend pushes the leases of the held jobs to Lease from now, by the
// database clock, and notices jobs whose lease was taken over.
func (k *leaseKeeper) extend(ctx context.Context) {
	k.mu.Lock()
	ids := make([]int64, 0, len(k.held))
	for id := range k.held {
		ids = append(ids, id)
	}
	deadline := k.validUntil
	k.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	lease := k.l.cfg.Lease
	sent := time.Now()
	// A heartbeat that hangs must not keep beat from cancelling the running
	// job when the leases can no longer be vouched for.
	until := sent.Add(lease / 3)
	if deadline.After(sent) && deadline.Before(until) {
		until = deadline
	}
	hctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	db := k.l.c.db
	still := ids
	r, err := db.NewRaw("UPDATE bunqueue_jobs SET run_at = "+k.l.c.dialect.NowPlus(lease)+" WHERE id IN (?) AND lease_token = ?",
		bun.List(ids), k.token).Exec(hctx)
	if err == nil {
		if n, _ := r.RowsAffected(); n < int64(len(ids)) {
			// Some lease was taken over: find which.
			still = nil
			err = db.NewRaw("SELECT id FROM bunqueue_jobs WHERE id IN (?) AND lease_token = ?", bun.List(ids), k.token).Scan(hctx, &still)
		}
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		k.l.c.cfg.Logger.WarnContext(ctx, "bunqueue: lease heartbeat failed", "queue", k.l.queue, "error", err)
		return
	}
	ok := map[int64]bool{}
	for _, id := range still {
		ok[id] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if !ok[id] && k.held[id] {
			k.lost[id] = true
			delete(k.held, id)
			if k.running == id && k.cancel != nil {
				k.cancel()
			}
		}
	}
	k.validUntil = sent.Add(lease - leaseMargin(lease))
}

// leaseMargin is how long before a lease's end, by the local clock, a
// worker stops vouching for it and cancels the job: room for a pause of
// the process (GC, scheduling) and for clocks that run at slightly
// different rates.
func leaseMargin(lease time.Duration) time.Duration {
	return max(lease/10, 200*time.Millisecond)
}
