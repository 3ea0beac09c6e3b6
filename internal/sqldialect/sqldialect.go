// Package sqldialect holds the SQL that differs between database servers,
// behind one small interface chosen from the bun dialect.
package sqldialect

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
)

// Dialect is what the engine needs to know about a database server.
type Dialect interface {
	// SkipLocked is the argument to bun's SelectQuery.For that locks the
	// selected rows and skips rows other transactions hold.
	SkipLocked() string
	// Retryable reports whether err is a transient conflict (deadlock,
	// lock wait timeout) after which the transaction should be retried.
	Retryable(err error) bool
	// CheckServer proves, with two connections, that the server skips
	// locked rows instead of waiting for them or ignoring the clause.
	CheckServer(ctx context.Context, db *bun.DB) error
	// CheckTable checks that the table exists and that its storage engine
	// takes row locks. schema may be empty for the connection's database.
	CheckTable(ctx context.Context, db *bun.DB, schema, table string) error
	// Local reports whether err arose in this process, such as a value
	// that does not fit the model, rather than on the server, on the
	// connection or from a cancelled context.
	Local(err error) bool
	// SessionID returns the server's id of the connection db runs on (a
	// transaction or a pinned connection), for EndSession.
	SessionID(ctx context.Context, db bun.IDB) (int64, error)
	// EndSession ends the server session id from another connection of
	// db, rolling back its transaction and releasing its locks even while
	// a statement of it still runs.
	EndSession(ctx context.Context, db bun.IDB, id int64) error
	// PrimaryKey returns the columns of the table's primary key, in
	// order; none when it has no primary key.
	PrimaryKey(ctx context.Context, db bun.IDB, schema, table string) ([]string, error)
	// Explain runs EXPLAIN on query, a SELECT, and returns its plan;
	// Plan.Problems tells what in it scans or sorts.
	Explain(ctx context.Context, db bun.IDB, query string) (Plan, error)
	// SuggestIndex derives from query, a SELECT over table (alias in the
	// query, in schema, empty for the connection's database) whose
	// primary key is pks, an index that would serve it: the columns of
	// the WHERE's equality conditions, then those of the ORDER BY, then
	// the primary key; and finds an existing index that serves it as
	// well. It reports false when it cannot derive the columns reliably.
	SuggestIndex(ctx context.Context, db bun.IDB, query, schema, table, alias string, pks []string) (Index, bool, error)
}

// For returns the Dialect of db, or an error naming the unsupported one.
func For(db *bun.DB) (Dialect, error) {
	switch name := db.Dialect().Name(); name {
	case dialect.MySQL:
		return MySQL{}, nil
	default:
		return nil, fmt.Errorf("bunqueue: the %s dialect is not supported; use MySQL 8.0.1+ or MariaDB 10.6+ through bun's mysqldialect", name)
	}
}
