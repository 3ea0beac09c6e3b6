// Package claimconn holds the connection a worker's claim transactions
// run on (its Session) and the savepoints its handlers take in them, on
// demand (Savepoints). It calls bun, database/sql and internal/sqldialect.
package claimconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// A Session is a worker's own connection while it has work. Its
// transactions are READ COMMITTED, set in each BEGIN where the server can
// (Dialect.TxOptions, PostgreSQL), or once for the session where it
// cannot (Dialect.SessionSetup, MySQL, whose START TRANSACTION cannot
// carry the level): beginning one is then one round trip instead of two.
// The connection is never handed back to the pool with that setting: a
// session ends by discarding it. Nothing else is kept on the server
// session, which a pooler in transaction mode may change from one
// transaction to the next: the server session of a transaction is read
// inside it, and noted with SetTxSession.
type Session struct {
	db      *bun.DB // the client's claim DB, with sp as a query hook
	sp      *Savepoints
	dialect sqldialect.Dialect
	conn    *bun.Conn            // nil: none yet, or discarded
	tx      sqldialect.TxSession // the server session of the current transaction, where read
	release context.CancelFunc   // releases the current transaction's context
}

// New returns the session of a worker whose claim transactions begin on
// claimDB.
func New(claimDB *bun.DB, d sqldialect.Dialect) *Session {
	sp := &Savepoints{}
	return &Session{db: sp.hooked(claimDB), sp: sp, dialect: d}
}

// rollbackGrace is how long a worker's transaction outlives the cancel of
// the worker's context (Stop's, when its own context ends), for its
// ROLLBACK to run on the server.
const rollbackGrace = 5 * time.Second

// Begin begins a READ COMMITTED transaction on the session's connection,
// taking one from the pool first if it has none, and returns it with the
// savepoints that its handlers take (see Savepoints). With s nil it
// begins one on the pool of claimDB.
//
// The transaction's context ends rollbackGrace after ctx does, not at
// once. When Stop cancels a batch whose handler is not in a statement,
// the ROLLBACK then runs, and the batch's locks are gone when the worker
// returns; the driver would otherwise close the connection without one,
// and the server notice later. Statements run under the handler's context
// and stop at once.
func (s *Session) Begin(ctx context.Context, claimDB *bun.DB) (bun.Tx, *Savepoints, error) {
	if s == nil {
		sp := &Savepoints{}
		tx, err := sp.hooked(claimDB).BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		return tx, sp, err
	}
	s.tx = sqldialect.TxSession{}
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return bun.Tx{}, nil, err
		}
	}
	s.releaseTx()
	var txCtx context.Context
	txCtx, s.release = graceAfter(ctx, rollbackGrace)
	tx, err := s.conn.BeginTx(txCtx, s.dialect.TxOptions())
	if err != nil {
		s.End()
	}
	return tx, s.sp, err
}

// connect takes a connection from the pool and sets its session up.
func (s *Session) connect(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	if setup := s.dialect.SessionSetup(); setup != "" {
		if _, err := conn.ExecContext(ctx, setup); err != nil {
			Discard(&conn)
			return fmt.Errorf("set the session's isolation level: %w", err)
		}
	}
	s.conn = &conn
	return nil
}

// graceAfter returns a context with ctx's values that ends grace after
// ctx does, and what releases it.
func graceAfter(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return gctx, func() { stop(); cancel() }
}

// releaseTx releases the context of the session's last transaction.
func (s *Session) releaseTx() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// HasConn reports whether the session holds a connection.
func (s *Session) HasConn() bool { return s.conn != nil }

// TxSession returns the server session of the current transaction, if it
// was read (SetTxSession) and the session still holds its connection.
func (s *Session) TxSession() sqldialect.TxSession {
	if s.conn == nil {
		return sqldialect.TxSession{}
	}
	return s.tx
}

// SetTxSession notes id as the server session of the current
// transaction, so that Stop can end it (see TxSession); with s nil it
// does nothing.
func (s *Session) SetTxSession(id sqldialect.TxSession) {
	if s != nil {
		s.tx = id
	}
}

// Failed ends the session after a transaction that did not commit: its
// connection may be broken (a KILL, a timeout) or in an unknown state.
func (s *Session) Failed(err error) {
	if s != nil && err != nil {
		s.End()
	}
}

// End closes the session's connection, out of the pool.
func (s *Session) End() {
	s.releaseTx()
	if s.conn != nil {
		Discard(s.conn)
		s.conn, s.tx = nil, sqldialect.TxSession{}
	}
}

// Discard closes conn and keeps the pool from reusing its session.
func Discard(conn *bun.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
