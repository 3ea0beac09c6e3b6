package claim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/txtimeout"
)

// recordWait bounds how long recordApart waits for the rows of an ended
// session to be unlocked.
const recordWait = 3 * time.Second

// callUnderTimeout runs a handler call, fn, with the queue's Timeout on its
// context, and returns a *txtimeout.LostError if the timeout took tx with it (see
// txtimeout.Call).
func (q *Queue[T]) callUnderTimeout(ctx context.Context, tx bun.Tx, fn func(ctx context.Context) error) error {
	return txtimeout.Call(ctx, q.Timeout, func(ctx context.Context) bool { return q.Env.Dialect.TxLost(ctx, tx) }, fn)
}

// endLost cools down the rows of keys, whose claim transaction was lost to
// a handler's timeout (see txtimeout.LostError), in this process, then ends the
// server session that held them, if it still runs their transaction, so
// that a statement still running there lets go of their locks. The cooldown keeps this process's other workers
// from taking the rows before their failures are recorded. It returns
// each row's cooldown.
func (q *Queue[T]) endLost(ctx context.Context, session sqldialect.TxSession, keys []engine.Key) []time.Duration {
	c := q.Env
	now := time.Now()
	cooldowns := make([]time.Duration, len(keys))
	for i, k := range keys {
		cooldowns[i] = q.Cool.Add(k.ID, k.Vals, now)
	}
	log := c.Logger.With("queue", q.Name)
	if !session.Known() {
		if c.Dialect.SkipLocked() != "" { // the server has row locks
			log.WarnContext(ctx, "bunqueue: a handler timed out in a statement; its session is not known, so it could not be ended, and holds its rows until the statement ends")
		}
		return cooldowns
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinishTimeout)
	defer cancel()
	if err := c.Dialect.EndTxSession(fctx, c.DB, session); err != nil {
		log.WarnContext(ctx, "bunqueue: end the session of a timed-out handler", "session", session.ID, "error", err)
	}
	return cooldowns
}

// failLost ends the session of items whose claim transaction was lost to
// a handler's timeout (endLost), then records each failure through
// OnError in a transaction of its own, if the row still matches the query
// and no other worker holds it. Rows whose failure is not recorded cool
// down in this process. It returns an *ItemError per item.
func (q *Queue[T]) failLost(ctx context.Context, session sqldialect.TxSession, items []T, cause error) []error {
	cooldowns := q.endLost(ctx, session, q.keys(items))
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinishTimeout)
	defer cancel()
	errs := make([]error, len(items))
	for i := range items {
		key, id := q.Key(&items[i])
		ie := &ItemError{Queue: q.Name, Key: id, Err: cause, Cooldown: cooldowns[i]}
		if q.OnError != nil {
			recorded, err := q.recordApart(fctx, engine.Key{Vals: key, ID: id}, cause)
			if err != nil {
				ie.Err = fmt.Errorf("%w; recording the failure apart failed: %w", cause, err)
			}
			if recorded {
				ie.Recorded, ie.Cooldown = true, 0
				q.Cool.Forget(id)
			}
		}
		errs[i] = ie
	}
	return errs
}

// recordApart locks the row of key, if it still matches the queue's query
// and no other transaction holds it, and calls OnError on it, in a
// transaction of its own. It reports whether OnError's writes committed
// and took the row out of the queue.
//
// The ended session lets go of its locks a moment after EndTxSession
// returns, once its statement notices: a row still locked is tried again
// for up to recordWait, then taken to be another worker's.
func (q *Queue[T]) recordApart(ctx context.Context, key engine.Key, cause error) (bool, error) {
	c := q.Env
	done := false
	began := time.Now()
	err := c.Retry(ctx, func() error {
		done = false
		return c.DB.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
			rows := make([]T, 0, 1)
			for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
				sel := q.onlyKeys(q.Apply(q.selectFrom(tx, &rows)), []engine.Key{key}).Limit(1)
				if err := sqldialect.Locking(sel, c.Dialect.SkipLocked()).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				if len(rows) > 0 {
					break
				}
				// Locked, or out of the queue: a plain read tells which.
				n, err := q.onlyKeys(q.Apply(q.selectFrom(tx, (*T)(nil))), []engine.Key{key}).Count(ctx)
				if err != nil {
					return err
				}
				if n == 0 || time.Since(began) > recordWait || !backoff.Sleep(ctx, wait) {
					break
				}
			}
			if len(rows) == 0 {
				return nil // done by another worker, or held by one
			}
			if err := q.Env.CallApp(ctx, func() error { return q.OnError(ctx, tx, &rows[0], cause) }); err != nil {
				return fmt.Errorf("OnError: %w", err)
			}
			still, err := q.stillQueued(ctx, tx, false, rows, []engine.Key{key}, []outcome{recorded})
			if err != nil {
				return err
			}
			done = !still[0]
			return nil
		})
	})
	return done, err
}

// sessionID returns the server session that runs tx, read in tx, for
// failLost, and for Stop to end it (Client.endSession): only when the
// queue has a Timeout, as it costs a round trip per transaction. It is
// read in every transaction, not once per connection, because a pooler
// in transaction mode runs each transaction of a connection on whichever
// server session is free: an id read once would name a session that
// another client (another application's transaction) may be using.
func (q *Queue[T]) sessionID(ctx context.Context, s *claimconn.Session, tx bun.Tx) (sqldialect.TxSession, error) {
	if q.Timeout == 0 {
		return sqldialect.TxSession{}, nil
	}
	id, err := q.Env.Dialect.TxSession(ctx, tx)
	if err != nil {
		return sqldialect.TxSession{}, fmt.Errorf("read the session id: %w", err)
	}
	s.SetTxSession(id)
	return id, nil
}

// WithTimeout is context.WithTimeout, or WithCancel when d is zero.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}
