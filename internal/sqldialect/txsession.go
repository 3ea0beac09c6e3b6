package sqldialect

import (
	"context"
	"database/sql"
	"time"

	"github.com/uptrace/bun"
)

// Sessions is what the engine needs to know about the server's sessions.
// A connection pooler in transaction mode (PgBouncer, RDS Proxy, ProxySQL
// multiplexing) runs each transaction of one client connection on
// whichever server session is free: a setting made for the session, a
// session id read once, a named prepared statement or a session's lock
// may belong to another client by the next transaction. So the engine
// keeps no state in a session that it needs later, except where the
// dialect says why the setting is safe (SessionSetup, ReadSetup).
type Sessions interface {
	// TxOptions are the options of a worker's transactions on its own
	// connection: READ COMMITTED where BEGIN sets it in the same
	// statement, nil where SessionSetup sets it (or there are no levels).
	TxOptions() *sql.TxOptions
	// SessionSetup is the statement a worker's own connection runs once,
	// to make its transactions READ COMMITTED by default; empty for none.
	SessionSetup() string
	// SessionID returns the server's id of the session that db (a
	// transaction or a pinned connection) runs on now.
	SessionID(ctx context.Context, db bun.IDB) (int64, error)
	// TxSession returns the server session that runs tx, and when its
	// transaction began, for EndTxSession. Read it inside the transaction
	// it is for.
	TxSession(ctx context.Context, tx bun.IDB) (TxSession, error)
	// EndTxSession ends the server session of s from another connection
	// of db, rolling back its transaction and releasing its locks even
	// while a statement of it still runs, but only while that session is
	// still in s's transaction: a session that moved on to another
	// transaction (another client's, behind a pooler) is left alone.
	// Ending a session that is gone is not an error.
	EndTxSession(ctx context.Context, db bun.IDB, s TxSession) error
	// CheckEndTxSession returns an error, saying why, when EndTxSession
	// cannot tell a session's transaction on db's server, and so would
	// never end one.
	CheckEndTxSession(ctx context.Context, db *bun.DB) error
	// StatementLost reports whether err says that a named prepared
	// statement does not exist on the session, or exists already: the
	// statements of one connection reach different server sessions.
	StatementLost(err error) bool
	// PreparedKept proves, with two connections of db, whether a
	// statement prepared on a connection still runs after another client
	// of a pooler has taken the server session it was prepared on. It is
	// true without a pooler, in a pooler's session mode, and behind
	// PgBouncer 1.21+ with max_prepared_statements; false in a pooler's
	// transaction mode otherwise.
	PreparedKept(ctx context.Context, db *bun.DB) (bool, error)
	// Advise returns err with what to do about it, where err says that
	// the driver's own prepared statements met a pooler; else err.
	Advise(err error) error
}

// TxSession is a transaction and the server session that runs it, as
// read inside it.
type TxSession struct {
	// ID is the server's id of the session; 0 for none known.
	ID int64
	// Began is when the transaction began on the server's clock, where
	// the server tells (PostgreSQL's now(), pg_stat_activity.xact_start).
	Began time.Time
}

// Known reports whether s names a session.
func (s TxSession) Known() bool { return s.ID != 0 }
