package bunqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// A session is a worker's own connection while it has work. Its
// transactions default to READ COMMITTED, set once for the session, so
// that beginning one is one round trip (START TRANSACTION) instead of two
// (SET TRANSACTION, then START TRANSACTION): one of the five or six round
// trips of a one-row transaction. The connection is never handed back to
// the pool with that setting: a session ends by discarding it.
type session struct {
	db      *bun.DB
	dialect sqldialect.Dialect
	conn    *bun.Conn // nil: none yet, or discarded
	id      int64     // the server's id of conn's session
	used    time.Time // when it last began a transaction
}

// begin begins a READ COMMITTED transaction on the session's connection,
// taking one from the pool first if it has none. With s nil it begins one
// on the pool.
func (s *session) begin(ctx context.Context, db *bun.DB) (bun.Tx, error) {
	if s == nil {
		return db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	}
	s.used = time.Now()
	if s.conn == nil {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return bun.Tx{}, err
		}
		if setup := s.dialect.SessionSetup(); setup != "" {
			if _, err := conn.ExecContext(ctx, setup); err != nil {
				discard(&conn)
				return bun.Tx{}, fmt.Errorf("set the session's isolation level: %w", err)
			}
		}
		id, err := s.dialect.SessionID(ctx, conn)
		if err != nil {
			discard(&conn)
			return bun.Tx{}, fmt.Errorf("read the session id: %w", err)
		}
		s.conn, s.id = &conn, id
	}
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		s.end()
	}
	return tx, err
}

// failed ends the session after a transaction that did not commit: its
// connection may be broken (a KILL, a timeout) or in an unknown state.
func (s *session) failed(err error) {
	if s != nil && err != nil {
		s.end()
	}
}

// end closes the session's connection, out of the pool.
func (s *session) end() {
	if s.conn != nil {
		discard(s.conn)
		s.conn, s.id = nil, 0
	}
}

// discard closes conn and keeps the pool from reusing its session.
func discard(conn *bun.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
