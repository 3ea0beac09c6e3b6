package bunqueue

import (
	"context"
	"errors"
	"fmt"
)

// A connection pooler in transaction mode (PgBouncer's default
// pool_mode=transaction, and others) runs each transaction of a client
// connection on whichever server session is free. bunqueue keeps no
// state in a server session that it relies on later: the isolation level
// is set in each transaction (Dialect.TxOptions), the session a Timeout
// may end is read inside the transaction it is for (Queue.sessionID), and
// the migration lock is a transaction's. Named prepared statements are
// server-session state that only some poolers keep (PgBouncer 1.21+ with
// max_prepared_statements): Start proves whether the pool keeps them, and
// the first statement found lost turns them off too.

// errPreparedLost marks a batch that failed because one of its prepared
// statements was missing on the server session (or there already): the
// client's prepared statements are off after it, and the batch is retried
// at once, in text.
var errPreparedLost = errors.New("bunqueue: a prepared statement was lost between server sessions")

// preparedHow says how to set up a pooled deployment, for the warning of
// preparedOff.
const preparedHow = "set Config.NoPreparedStatements to say so, or, to keep them, use PgBouncer 1.21+ with max_prepared_statements set"

// checkPooler turns the client's prepared statements off, with a warning,
// if the pool does not keep them, and refuses a driver whose own do not
// work through the pool (Dialect.PreparedKept, whatever
// Config.NoPreparedStatements says); and checks that the sessions of
// handlers that time out can be ended, if a queue has a Timeout.
func (c *Client) checkPooler(ctx context.Context, runners []*runner) error {
	kept, err := c.dialect.PreparedKept(ctx, c.db)
	if err != nil {
		return err
	}
	if !kept {
		c.preparedOff(ctx, "a statement prepared on a connection was gone once another client of a connection pooler had its server session", nil)
	}
	for _, r := range runners {
		if r.Timeout > 0 {
			if err := c.dialect.CheckEndTxSession(ctx, c.db); err != nil {
				return fmt.Errorf("bunqueue: queue %q has a Timeout: %w", r.Name, err)
			}
			break
		}
	}
	return nil
}

// preparedOff turns the client's prepared statements off for its life and
// logs why, once; err is the error that told, if one did.
func (c *Client) preparedOff(ctx context.Context, why string, err error) {
	if c.stmts == nil || !c.stmts.Off() {
		return
	}
	args := []any{}
	if err != nil {
		args = append(args, "error", err)
	}
	c.cfg.Logger.WarnContext(ctx, "bunqueue: prepared statements are off for this client: "+why+
		" (a connection pooler in transaction mode, such as PgBouncer); every statement runs in text; "+preparedHow, args...)
}

// prepareFailed is told of a statement whose background preparation
// failed.
func (c *Client) prepareFailed(text string, err error) {
	if c.dialect.StatementLost(err) {
		c.preparedOff(context.Background(), "preparing a statement found one of its name on the server session already", err)
		return
	}
	c.cfg.Logger.Debug("bunqueue: prepare a statement (it runs in text meanwhile)", "statement", text, "error", err)
}

// retryable reports whether a transaction that failed with err runs
// again: after a conflict (Dialect.Retryable), and after a lost prepared
// statement, then in text.
func (c *Client) retryable(err error) bool {
	return c.dialect.Retryable(err) || errors.Is(err, errPreparedLost)
}
