package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/finish"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/slotsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/telemetry"
)

// errLeaseExpired is the error kept for a job whose last attempt's lease
// ran out: its worker stopped without finishing it.
var errLeaseExpired = errors.New("bunqueue: the lease of the job's last attempt expired: its worker stopped (crash, kill, lost connection) without finishing it")

// Runner runs one jobs queue in lease mode: a short transaction claims
// and leases its jobs (Runner.claim), which then run one after the
// other outside any transaction while a Keeper extends their leases;
// each is completed, failed or released by the finisher if its lease is
// still this worker's. It implements engine.Work.
type Runner struct {
	Queue string
	Jobs  *claim.Queue[jobsql.Row] // its claims: a queue over the jobs table
	Slots *limit.Global            // the GlobalLimit's, nil without one
	Lease time.Duration            // how long a lease lasts without a heartbeat
	// Timeout is the queue's Timeout for each job, if any; KeyRatePer its
	// KeyRate's period.
	Timeout    time.Duration
	KeyRatePer time.Duration
	// Run runs a leased job's worker, under the queue's lifecycle hooks,
	// and returns what it recorded with RecordOutput.
	Run func(ctx context.Context, row *jobsql.Row) (output []byte, err error)
	Env *Env
}

// Env is what the lease runners need of the client.
type Env struct {
	DB      *bun.DB
	Dialect sqldialect.Dialect
	SQL     jobsql.SQL
	Tel     *telemetry.Telemetry
	Logger  *slog.Logger
	// Retry runs fn again after a deadlock or a lock wait timeout.
	Retry func(ctx context.Context, fn func() error, attrs ...metric.AddOption) error
	// Finisher changes the state of jobs (internal/finish).
	Finisher func() finish.Finisher
	// Fail records the failed attempt of row, cause, in tx, if token
	// still holds its lease ("": no lease): a retry, a snooze or a
	// failure for good. It reports whether it did, and when the job runs
	// again.
	Fail func(ctx context.Context, tx bun.Tx, row *jobsql.Row, attempt int, cause error, token string) (changed bool, after time.Duration, err error)
	// Outcome is the outcome of a failure Fail recorded.
	Outcome func(cause error, attempt, maxAttempts int) string
	// Attrs are the span attributes of a job's attempt.
	Attrs func(row *jobsql.Row, attempt int) []attribute.KeyValue
	// Finished counts a job that ran, for Stats: id is its id, err its
	// Failure's report, or nil (completed).
	Finished func(queue string, id int64, err error)
	// Report turns a job's failure into the error the worker logs.
	Report func(f *Failure) error
	// BatchTarget bounds how long the jobs of a batch that succeeded
	// wait to be completed together (see complete.go).
	BatchTarget time.Duration
}

// Failure is what became of a job whose attempt did not complete, for
// the worker's log line.
type Failure struct {
	Queue       string
	ID          int64
	Kind        string
	Attempt     int // the attempt that failed, from 1
	MaxAttempts int
	Err         error
	// Recorded: the failure was written (a retry, a snooze, a failure for
	// good); Outcome says which, and After when the job runs again.
	Recorded bool
	Outcome  string
	After    time.Duration
	Stopped  bool // released because the client is stopping
}

// failure returns the failure of row's attempt, not yet recorded.
func failure(queue string, row *jobsql.Row, attempt int) Failure {
	return Failure{Queue: queue, ID: row.ID, Kind: row.Kind, Attempt: attempt, MaxAttempts: row.MaxAttempts, Outcome: telemetry.OutcomeReleased}
}

// Fetch reads the keys of the next waiting jobs (see Queue.fetch).
func (l *Runner) Fetch(ctx context.Context, db bun.IDB, limit int) ([]engine.Key, error) {
	return l.Jobs.Fetch(ctx, db, limit)
}

// Probe returns the idle watcher's read of one waiting job (see
// Queue.probe).
func (l *Runner) Probe(db bun.IDB, except []engine.Key) *bun.SelectQuery {
	return l.Jobs.Probe(db, except)
}

// Depth counts the waiting jobs, up to limit.
func (l *Runner) Depth(ctx context.Context, limit int) (int, error) {
	return l.Jobs.Depth(ctx, limit)
}

// Explain returns the read of fetch, for the plan check at Start.
func (l *Runner) Explain() (*bun.SelectQuery, *schema.Table) { return l.Jobs.Explain() }

// RunBatch leases the jobs of keys that are still waiting and not locked (with
// keys nil: up to most jobs at the head of the queue) in a short
// transaction, then runs them one after the other outside any
// transaction, keeping their leases alive.
//
// It does not use the worker's session: a lease-mode job holds no
// connection while it runs.
func (l *Runner) RunBatch(ctx context.Context, _ *claimconn.Session, most int, keys []engine.Key) engine.Result {
	var res engine.Result
	var b leased
	var claimed time.Time
	began := time.Now()
	err := l.Env.Retry(ctx, func() (err error) {
		// Taken before the claim's UPDATE sets the leases from the database
		// clock: they end no earlier than claimed + Lease.
		claimed = time.Now()
		b, err = l.claim(ctx, most, keys, &res)
		return err
	})
	rows, token, held := b.rows, b.token, b.held
	if errors.Is(err, limit.ErrLimited) {
		res.Err = err
		return res
	}
	l.Env.Tel.RecordClaim(ctx, l.Queue, began)
	if err != nil {
		res.Err = fmt.Errorf("bunqueue: queue %q: lease: %w", l.Queue, err)
		return res
	}
	res.Got = make([]string, len(rows))
	for i := range rows {
		_, res.Got[i] = l.Jobs.Key(&rows[i])
	}
	if len(rows) == 0 {
		return res
	}
	if len(held) > 0 {
		defer l.freeSlots(ctx, held, token) // after the keeper stops
	}
	defer l.settle(ctx, b.starts)
	keeper := l.keeper(rows, token, claimed, held)
	go keeper.Run(ctx)
	defer keeper.Stop()
	done := &leaseCompletions{l: l, keeper: keeper, token: token}
	for i := range rows {
		if done.due() {
			done.flush(ctx, &res)
		}
		l.runOne(ctx, keeper, &rows[i], b.starts[i], token, &res, done)
	}
	done.flush(ctx, &res)
	return res
}

// claim locks waiting jobs, moves those whose last attempt's lease expired
// to the failed jobs, and leases the others with a fresh token. With a
// GlobalLimit it first takes a free slot (limit.ErrLimited if there is
// none); with a KeyLimit it leases only the jobs whose key has a free
// slot. It leases the slots with the jobs, and returns them. With a
// RateLimit it leases no more jobs than it found free slots of it (a
// *limit.RateWait if none), with a KeyRate only the jobs whose key has
// one; it holds one of each per job leased, in the same transaction, and
// returns them with the jobs: each job starts under them (see
// rateSlots), or goes back to its queue.
//
// The transaction does not end with ctx: a driver that sends COMMIT under
// a context that Stop cancels (pgx does) reports an error after the server
// may have committed, and the jobs would stay leased, not run, until their
// leases ran out. The caller releases what it claimed if ctx has ended.
func (l *Runner) claim(ctx context.Context, most int, keys []engine.Key, res *engine.Result) (leased, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	tx, err := l.Env.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return leased{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var b leased
	if l.Slots != nil {
		slot, err := l.Slots.Take(ctx, tx)
		if err != nil {
			return leased{}, err
		}
		b.held = append(b.held, slot)
	}
	var rated []limit.RateSlot // the RateLimit's slots, one per job that starts
	if rate := l.Jobs.Rate; rate != nil {
		if rated, err = rate.Take(ctx, tx, claim.Want(most, keys)); err != nil {
			return leased{}, err
		}
		most, keys, res.Untried = claim.Fit(rate.Taken(rated), most, keys)
	}
	rows, err := l.Jobs.Claim(ctx, tx, l.Jobs.Prepares, most, keys) // from a worker: prepared statements serve it
	if err != nil {
		return leased{}, err
	}
	res.Claimed = len(rows)
	live, expired, err := l.expire(ctx, tx, rows)
	if err != nil {
		return leased{}, err
	}
	if l.Jobs.KeyLimit != nil {
		var keyed []limit.Held
		if live, keyed, err = l.takeKeySlots(ctx, tx, live); err != nil {
			return leased{}, err
		}
		b.held = append(b.held, keyed...)
	}
	var keyCovers []*limit.Cover
	if live, keyCovers, err = l.takeRateTokens(ctx, tx, live); err != nil {
		return leased{}, err
	}
	b.rows, b.token = live, limit.NewToken()
	if len(live) == 0 {
		b.held = nil // the transaction's end frees them
	} else if err := l.lease(ctx, tx, &b, rated, keyCovers); err != nil {
		return leased{}, err
	}
	if err := tx.Commit(); err != nil {
		return leased{}, err
	}
	res.ItemErrs = append(res.ItemErrs, expired...)
	return b, nil
}

// leased is what a lease transaction leased: its jobs, the token of
// their leases, the slots leased with them, and the rate slots each job
// is to start under (see rateSlots), by job.
type leased struct {
	rows   []jobsql.Row
	token  string
	held   []limit.Held
	starts []rateSlots
}

// rateSlots are the rate slots a leased job starts under: the
// RateLimit's and its key's KeyRate one, nil without.
type rateSlots struct{ rate, key *limit.Cover }

// settle settles the rate slots of a batch's jobs once they have run
// (see limit.Settle): one statement for the RateLimit's, one per key for
// the KeyRate's.
func (l *Runner) settle(ctx context.Context, starts []rateSlots) {
	var rate, key []*limit.Cover
	for _, st := range starts {
		rate, key = append(rate, st.rate), append(key, st.key)
	}
	limit.Settle(ctx, l.Env.Logger, l.Env.DB, rate)
	limit.Settle(ctx, l.Env.Logger, l.Env.DB, key)
}

// started is when the job's start was counted (the first of its slots'
// Started), zero without a rate limit.
func (r rateSlots) started() time.Time {
	if at := r.rate.Started(); !at.IsZero() {
		return at
	}
	return r.key.Started()
}

// start reports whether the job may start now under its rate slots (see
// limit.Cover.Start: it waits for a slot taken ahead to be free),
// extending their holds on db if it comes late.
func (r rateSlots) start(ctx context.Context, db bun.IDB) (bool, error) {
	ok, err := r.rate.Start(ctx, db)
	if ok {
		ok, err = r.key.Start(ctx, db)
	}
	return ok, err
}

// expire moves the jobs of rows whose last attempt's lease expired to the
// failed jobs, and returns the others, their attempt counted, and an
// error (see Env.Report) for each it moved.
func (l *Runner) expire(ctx context.Context, tx bun.Tx, rows []jobsql.Row) (live []jobsql.Row, expired []error, _ error) {
	live = rows[:0]
	for _, r := range rows {
		if r.Attempts >= r.MaxAttempts {
			if _, _, err := l.Env.Fail(ctx, tx, &r, r.Attempts, errLeaseExpired, ""); err != nil {
				return nil, nil, err
			}
			f := failure(l.Queue, &r, r.Attempts)
			f.Err, f.Recorded, f.Outcome = errLeaseExpired, true, l.Env.Outcome(errLeaseExpired, r.Attempts, r.MaxAttempts)
			expired = append(expired, l.Env.Report(&f))
			continue
		}
		r.Attempts++
		live = append(live, r)
	}
	return live, expired, nil
}

// lease leases the jobs of b and the slots of b.held, all of which tx
// locks, to b.token, and holds one of the RateLimit's slots of rated per
// job; it notes each job's rate slots, with keyCovers, its KeyRate ones
// (nil without a KeyRate), in b.starts.
func (l *Runner) lease(ctx context.Context, tx bun.Tx, b *leased, rated []limit.RateSlot, keyCovers []*limit.Cover) error {
	ids := make([]int64, len(b.rows))
	for i := range b.rows {
		ids[i] = b.rows[i].ID
	}
	if err := l.Env.SQL.Lease(ctx, tx, ids, b.token, l.Lease); err != nil {
		return err
	}
	if err := limit.Lease(ctx, l.slots(), tx, b.held, b.token, l.Lease); err != nil {
		return err
	}
	b.starts = make([]rateSlots, len(b.rows))
	for i := range b.starts {
		if keyCovers != nil {
			b.starts[i].key = keyCovers[i]
		}
	}
	if rated == nil {
		return nil
	}
	rated = rated[:len(b.rows)]
	took, ahead := time.Now(), limit.Ahead(rated)
	for i := range b.starts {
		b.starts[i].rate = l.Jobs.Rate.Cover(rated[i], b.token, took, ahead)
	}
	return l.Jobs.Rate.Hold(ctx, tx, rated, b.token)
}

// runOne runs one leased job and completes, fails or releases it, if the
// lease is still this worker's, and records what became of it in res
// (the time its worker ran in res.work). A job that succeeded among
// quick ones waits in done to be completed with the others.
func (l *Runner) runOne(ctx context.Context, keeper *Keeper, row *jobsql.Row, st rateSlots, token string, res *engine.Result, done *leaseCompletions) {
	j := &leasedJob{l: l, row: row, token: token, fate: failure(l.Queue, row, row.Attempts)}
	end := j.trace(ctx)
	if ok, err := st.start(ctx, l.Env.DB); !ok {
		l.skip(ctx, keeper, j, err, res, end)
		return
	} else if at := st.started(); !at.IsZero() {
		telemetry.RateStarted(j.it.Ctx, at)
	}
	began := time.Now()
	gone, err := j.work(ctx, keeper)
	took := time.Since(began)
	res.Work += took
	var ierr error
	switch {
	case gone:
		ierr = j.failure(errors.New("bunqueue: the job's lease was lost before it started; another worker may hold it now"))
	case err == nil && ctx.Err() == nil && done.takes(took):
		keeper.Ran(row.ID) // its lease is kept until it is completed
		done.add(j, end)
		return
	default:
		ierr = j.settle(ctx, err, keeper.Finish(row.ID))
	}
	l.record(res, j.row.ID, ierr, end)
}

// skip gives back at once, without using its attempt, a job that may not
// start now (its rate slots could not cover its start, or extending them
// failed with err): it runs again soon, from its queue.
func (l *Runner) skip(ctx context.Context, keeper *Keeper, j *leasedJob, err error, res *engine.Result, end func(ierr error)) {
	keeper.Finish(j.row.ID)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	_, rerr := j.release(fctx)
	if err = errors.Join(err, rerr); err != nil {
		l.record(res, j.row.ID, j.failure(fmt.Errorf("bunqueue: the job was not started (its rate slot could not cover it), and: %w", err)), end)
		return
	}
	end(nil)
}

// record ends the spans of job id with ierr, its error for the batch
// (nil once it completed), counts it for Client.Stats and adds it to res.
func (l *Runner) record(res *engine.Result, id int64, ierr error, end func(ierr error)) {
	end(ierr)
	l.Env.Finished(l.Queue, id, ierr)
	if ierr != nil {
		res.ItemErrs = append(res.ItemErrs, ierr)
	} else {
		res.Done++
	}
}

// keeper returns the keeper of the leases of rows, leased with token by a
// statement sent at claimed, and of the slots held with them.
func (l *Runner) keeper(rows []jobsql.Row, token string, claimed time.Time, held []limit.Held) *Keeper {
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	extend := func(ctx context.Context, ids []int64) ([]int64, error) {
		db, jobs := l.Env.DB, l.Env.SQL
		still := ids
		n, err := jobs.Extend(ctx, db, ids, token, l.Lease)
		if err == nil && n < int64(len(ids)) {
			// Some lease was taken over: find which.
			still, err = jobs.Leased(ctx, db, ids, token)
		}
		if err == nil && len(held) > 0 {
			var kept bool
			if kept, err = l.extendSlots(ctx, held, token); err == nil && !kept {
				still = nil // a slot ran out and was taken: no job may run on under it
			}
		}
		return still, err
	}
	warn := func(ctx context.Context, err error) {
		l.Env.Logger.WarnContext(ctx, "bunqueue: lease heartbeat failed", "queue", l.Queue, "error", err)
	}
	return New(ids, l.Lease, claimed, extend, warn)
}

// extendSlots pushes the end of the leases of held to Lease from now,
// and reports whether token still held every one.
func (l *Runner) extendSlots(ctx context.Context, held []limit.Held, token string) (bool, error) {
	return limit.Extend(ctx, l.slots(), l.Env.DB, held, token, l.Lease)
}

// freeSlots gives back the slots that a batch leased with its jobs, once
// they all ended. A slot it fails to free is free when its lease runs out.
func (l *Runner) freeSlots(ctx context.Context, held []limit.Held, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	for _, h := range held {
		if err := limit.Free(ctx, l.slots(), l.Env.DB, h, token); err != nil {
			l.Env.Logger.WarnContext(ctx, "bunqueue: freeing a slot of a limit failed; it is free when its lease runs out", "queue", l.Queue, "error", err)
		} else if l.Jobs.KeyLimit != nil {
			l.Jobs.KeyLimit.Freed([]string{h.Limit.Key})
		}
	}
}

// takeKeySlots takes, in the lease transaction tx, one slot per key among
// rows, and returns the rows that may be leased, and the slots to lease
// with them.
func (l *Runner) takeKeySlots(ctx context.Context, tx bun.Tx, rows []jobsql.Row) ([]jobsql.Row, []limit.Held, error) {
	run, held, err := l.Jobs.KeyLimit.TakeSlots(ctx, tx, len(rows), func(i int) (string, any, bool) { return l.Jobs.KeyOf(&rows[i]) })
	if err != nil {
		return nil, nil, err
	}
	return keepRows(rows, run), held, nil
}

// keepRows returns the rows of rows that may run, in place.
func keepRows(rows []jobsql.Row, run []bool) []jobsql.Row {
	kept := rows[:0]
	for i := range rows {
		if run[i] {
			kept = append(kept, rows[i])
		}
	}
	return kept
}

// takeRateTokens takes, in the lease transaction tx, the KeyRate's slots
// of rows, if the queue has a KeyRate, and returns the rows that may be
// leased, with the KeyRate slot each is to start under (nil without a
// KeyRate).
func (l *Runner) takeRateTokens(ctx context.Context, tx bun.Tx, rows []jobsql.Row) ([]jobsql.Row, []*limit.Cover, error) {
	k := l.Jobs.KeyRate
	if k == nil || len(rows) == 0 {
		return rows, nil, nil
	}
	run, covers, err := k.TakeTokens(ctx, tx, l.KeyRatePer, len(rows), func(i int) (string, any, bool) { return l.Jobs.KeyOf(&rows[i]) })
	if err != nil {
		return nil, nil, err
	}
	kept := covers[:0]
	for i, c := range covers {
		if run[i] {
			kept = append(kept, c)
		}
	}
	return keepRows(rows, run), kept, nil
}

// slots returns the statements on the slots table of the runner's
// tables.
func (l *Runner) slots() slotsql.SQL { return slotsql.New(l.Env.Dialect, l.Env.SQL.Tables()) }
