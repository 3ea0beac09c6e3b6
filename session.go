package bunqueue

import (
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/claimconn"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// A session is a worker's own connection while it has work, and
// savepoints take each handler's savepoint on demand, before its first
// statement: see internal/claimconn.
type (
	session    = claimconn.Session
	savepoints = claimconn.Savepoints
)

// newSession returns the session of a worker whose claim transactions
// begin on claimDB.
func newSession(claimDB *bun.DB, d sqldialect.Dialect) *session { return claimconn.New(claimDB, d) }

// discard closes conn and keeps the pool from reusing its session.
func discard(conn *bun.Conn) { claimconn.Discard(conn) }
