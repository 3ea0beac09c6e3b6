package claimconn

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Savepoints takes, when armed, a savepoint before the next statement of
// a claim transaction. One belongs to each worker's session (and to each
// claim transaction begun on the pool), as the query hook of the DB its
// transactions are begun from.
//
// A batch's handlers share its claim transaction, and a failed handler's
// writes must be undone without undoing the others': each handler runs
// after a savepoint. A SAVEPOINT is a round trip, and most handlers of a
// busy queue either write nothing through tx (a job that calls an API)
// or succeed; so the savepoint is taken on demand, right before the
// first statement the handler (or OnError) runs in the transaction. A
// handler that runs no statement takes none and, if it fails, has
// nothing to undo.
//
// The hook sees what runs through bun: tx's query builders and its
// Exec, Query and QueryRow methods, whatever context they are given.
// Statements run on the *sql.Tx beneath (tx.Tx, tx.Prepare, tx.Stmt)
// bypass bun's hooks: they take no savepoint, so the first of them
// must come after a statement through bun.
type Savepoints struct {
	armed atomic.Bool // the next statement takes the savepoint: the hook's fast path

	mu    sync.Mutex
	tx    bun.Tx // the transaction the savepoint is taken in
	name  string // the savepoint's name
	taken bool   // the savepoint of the current arm was taken
	err   error  // taking it failed

	// Stmts times the statements, for the batch's work (see StmtTimes).
	Stmts StmtTimes
}

var _ bun.QueryHook = (*Savepoints)(nil)

// hooked returns a copy of db whose statements pass through sp.
func (sp *Savepoints) hooked(db *bun.DB) *bun.DB { return db.WithQueryHook(sp) }

// Arm makes the next statement run in tx take the savepoint name first.
func (sp *Savepoints) Arm(tx bun.Tx, name string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.tx, sp.name, sp.taken, sp.err = tx, name, false, nil
	sp.armed.Store(true)
}

// Disarm ends the arm, and reports whether the savepoint was taken and
// what taking it failed with, if it did.
func (sp *Savepoints) Disarm() (taken bool, err error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.armed.Store(false)
	sp.tx = bun.Tx{}
	return sp.taken, sp.err
}

// BeforeQuery implements bun.QueryHook: armed, it takes the savepoint
// before the statement runs. If that fails, it returns a cancelled
// context, so that the statement does not run outside the savepoint: the
// handler sees the error, and the batch fails with it (see Disarm).
func (sp *Savepoints) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	if !sp.armed.Load() {
		return ctx
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.armed.Swap(false) {
		return ctx // another statement took it meanwhile
	}
	// On the transaction beneath, not through bun: this hook would see it.
	if _, err := sp.tx.Tx.ExecContext(ctx, sqldialect.Savepoint(sp.name)); err != nil {
		sp.err = fmt.Errorf("SAVEPOINT before the handler's first statement: %w", err)
		cctx, cancel := context.WithCancelCause(ctx)
		cancel(sp.err)
		return cctx
	}
	sp.taken = true
	sp.Stmts.also() // timed with the statement it came before
	return ctx
}

// AfterQuery implements bun.QueryHook: it times the statement (see
// StmtTimes).
func (sp *Savepoints) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	sp.Stmts.add(time.Since(e.StartTime))
}
