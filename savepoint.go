package bunqueue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
)

// A batch's handlers share its claim transaction, and a failed handler's
// writes must be undone without undoing the others': each handler runs
// after a savepoint. A SAVEPOINT is a round trip, and most handlers of a
// busy queue either write nothing through tx (a job that calls an API)
// or succeed; so the savepoint is taken on demand, right before the
// first statement the handler (or OnError) runs in the transaction, by a
// query hook on the DB the transaction was begun from. A handler that
// runs no statement takes none and, if it fails, has nothing to undo.
//
// The hook sees what runs through bun: tx's query builders and its
// Exec, Query and QueryRow methods, whatever context they are given.
// Statements run on the *sql.Tx beneath (tx.Tx, tx.Prepare, tx.Stmt)
// bypass bun's hooks: they take no savepoint, so the first of them
// must come after a statement through bun (see HandlerFunc).

// savepoints takes, when armed, a savepoint before the next statement
// of a claim transaction. One belongs to each worker's session (and to
// each claim transaction begun on the pool), as the query hook of the DB
// its transactions are begun from.
type savepoints struct {
	armed atomic.Bool // the next statement takes the savepoint: the hook's fast path

	mu    sync.Mutex
	tx    bun.Tx // the transaction the savepoint is taken in
	name  string // the savepoint's name
	taken bool   // the savepoint of the current arm was taken
	err   error  // taking it failed

	stmts stmtTimes // the statements' times, for the batch's work (see work)
}

var _ bun.QueryHook = (*savepoints)(nil)

// hooked returns a copy of db whose statements pass through sp.
func (sp *savepoints) hooked(db *bun.DB) *bun.DB { return db.WithQueryHook(sp) }

// arm makes the next statement run in tx take the savepoint name first.
func (sp *savepoints) arm(tx bun.Tx, name string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.tx, sp.name, sp.taken, sp.err = tx, name, false, nil
	sp.armed.Store(true)
}

// disarm ends the arm, and reports whether the savepoint was taken and
// what taking it failed with, if it did.
func (sp *savepoints) disarm() (taken bool, err error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.armed.Store(false)
	sp.tx = bun.Tx{}
	return sp.taken, sp.err
}

// BeforeQuery implements bun.QueryHook: armed, it takes the savepoint
// before the statement runs. If that fails, it returns a cancelled
// context, so that the statement does not run outside the savepoint: the
// handler sees the error, and the batch fails with it (see disarm).
func (sp *savepoints) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	if !sp.armed.Load() {
		return ctx
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.armed.Swap(false) {
		return ctx // another statement took it meanwhile
	}
	// On the transaction beneath, not through bun: this hook would see it.
	if _, err := sp.tx.Tx.ExecContext(ctx, "SAVEPOINT "+sp.name); err != nil {
		sp.err = fmt.Errorf("SAVEPOINT before the handler's first statement: %w", err)
		cctx, cancel := context.WithCancelCause(ctx)
		cancel(sp.err)
		return cctx
	}
	sp.taken = true
	sp.stmts.also() // timed with the statement it came before
	return ctx
}

// AfterQuery implements bun.QueryHook: it times the statement (see
// stmtTimes).
func (sp *savepoints) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	sp.stmts.add(time.Since(e.StartTime))
}

// A handler's statements are part of its work, which sizes its batches
// (internal/batchsize): a round trip each, at least. But a statement
// that waits on a busy server (commits queued for the disk, a flush of
// the log) takes longer whatever the batch, and more so with smaller
// batches, whose commits come more often: timed as they ran, such waits
// shrink the batches that cause them, down to a row or two per
// transaction. So a handler's work counts each of its statements as the
// fastest statement the session ran lately (its floor: a round trip and
// the least the server does), and the rest of its time as it ran.

// stmtFloorEvery is how many statements the floor is the fastest of,
// give or take: enough to hold through a spell of waits, few enough to
// follow a database that moved further away.
const stmtFloorEvery = 256

// stmtTimes times the statements of one session: how many ran in the
// current handler call (see start and end) and how long they took, and
// the fastest of the last stmtFloorEvery or so.
type stmtTimes struct {
	mu       sync.Mutex
	counting bool
	n        int
	took     time.Duration
	fastest  time.Duration // of this stretch of statements; 0 before the first
	previous time.Duration // of the stretch before
	seen     int           // statements in this stretch
}

// add times one statement.
func (s *stmtTimes) add(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counting {
		s.n++
		s.took += d
	}
	if s.seen == 0 || d < s.fastest {
		s.fastest = d
	}
	if s.seen++; s.seen >= stmtFloorEvery {
		s.previous, s.seen = s.fastest, 0
	}
}

// also counts one more statement in the current handler call, whose time
// the next one's includes (its savepoint).
func (s *stmtTimes) also() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counting {
		s.n++
	}
}

// start begins counting a handler call's statements.
func (s *stmtTimes) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counting, s.n, s.took = true, 0, 0
}

// work returns the work of a handler call that took took, its
// statements counted at the floor, and ends the count.
func (s *stmtTimes) work(took time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counting = false
	floor := s.fastest
	if s.previous > 0 && (s.seen == 0 || s.previous < floor) {
		floor = s.previous
	}
	return max(took-s.took, 0) + time.Duration(s.n)*min(floor, s.took/time.Duration(max(s.n, 1)))
}
