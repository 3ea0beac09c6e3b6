package sqldialect

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// TxOptions implements Sessions: READ COMMITTED, in BEGIN. pgx's BeginTx
// sends it as one statement, "begin isolation level read committed": one
// round trip, as a plain BEGIN, and nothing is left on the server session
// after the transaction, for a pooler to hand to another client.
func (Postgres) TxOptions() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// SessionSetup implements Sessions: none; TxOptions sets the level.
func (Postgres) SessionSetup() string { return "" }

// TxSession implements Sessions: the backend's pid, and now(), when the
// transaction began, which pg_stat_activity shows as xact_start for as
// long as the backend runs that transaction.
func (Postgres) TxSession(ctx context.Context, tx bun.IDB) (TxSession, error) {
	var s TxSession
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid(), now()").Scan(&s.ID, &s.Began); err != nil {
		return TxSession{}, err
	}
	return s, nil
}

// EndTxSession implements Sessions with pg_terminate_backend, which a
// role may call on its own sessions (others need pg_signal_backend), on
// the backend only while pg_stat_activity shows it in s's transaction.
// The backend exits, rolling back its transaction, a moment after that
// returns: EndTxSession waits for it to leave pg_stat_activity, up to
// endSessionWait, so that its locks are gone when EndTxSession returns.
//
// Between the check and the signal the backend could, in principle, end
// the transaction and start another: not a transaction that bunqueue
// ends, whose client connection is closed (a pooler gives no other client
// a server session whose client left in a transaction).
func (Postgres) EndTxSession(ctx context.Context, db bun.IDB, s TxSession) error {
	if !s.Known() {
		return nil
	}
	var ok bool // false, with a warning, when the backend exited meanwhile
	err := db.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ? AND xact_start = ?", s.ID, s.Began).Scan(&ok)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !ok {
		return nil // gone, or in another transaction
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(endSessionWait)
	for wait := time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 50*time.Millisecond) {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?", s.ID).Scan(&n); err != nil || n == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// endSessionWait bounds how long EndTxSession waits for the backend to
// exit.
const endSessionWait = 5 * time.Second

// CheckEndTxSession implements Sessions: pg_stat_activity shows a
// backend's transaction only with track_activities on.
func (Postgres) CheckEndTxSession(ctx context.Context, db *bun.DB) error {
	var on string
	if err := db.QueryRowContext(ctx, "SELECT current_setting('track_activities')").Scan(&on); err != nil {
		return fmt.Errorf("read track_activities: %w", err)
	}
	if on != "on" {
		return errors.New("track_activities is off on the server: pg_stat_activity does not show which transaction a session runs, " +
			"so the session of a handler that times out could not be ended, and its rows would stay locked until its statement ends; " +
			"turn track_activities on, or set no Timeout")
	}
	return nil
}

// StatementLost implements Sessions: 26000 invalid_sql_statement_name (no
// prepared statement of that name on the session), 42P05
// duplicate_prepared_statement (one of that name exists already: another
// client of the pooler prepared the same text there).
func (Postgres) StatementLost(err error) bool {
	switch sqlState(err) {
	case "26000", "42P05":
		return true
	}
	return false
}

// driverCache reports whether err is a lost statement of pgx's own
// statement cache, whose names begin with stmtcache_ (pgx v5) where
// database/sql's prepared statements' begin with stmt_.
func (d Postgres) driverCache(err error) bool {
	return d.StatementLost(err) && strings.Contains(err.Error(), `"stmtcache_`)
}

// Advise implements Sessions: pgx's default query mode prepares every
// statement on the server session of its connection and runs it there by
// name later, which a pooler in transaction mode breaks.
func (d Postgres) Advise(err error) error {
	if !d.driverCache(err) {
		return err
	}
	return fmt.Errorf("%w; pgx's statement cache prepares each statement on the server session its connection has, "+
		"and a connection pooler in transaction mode (PgBouncer) runs the next transaction on another: "+
		"add default_query_exec_mode=exec (or simple_protocol) to the DSN", err)
}

// pidQuery reads the backend's pid.
const pidQuery = "SELECT pg_backend_pid()"

// pooledTries bounds how often PreparedKept tries to make a pooler hand a
// server session to another client.
const pooledTries = 3

// PreparedKept implements Sessions. Without a pooler, or in its session
// mode, a client connection keeps its server session, which no other
// client gets. In transaction mode, PgBouncer hands the server session
// freed last to the next client that asks: a transaction begun on a
// second connection gets the session the first one used, and the first
// one's next statement runs on another. The probe makes that happen, up
// to pooledTries times, and runs a statement prepared on the first
// connection after it.
//
// In pgx's default query mode the second connection's read, the text the
// first one ran, fails on the session where the first one prepared it:
// that error, with Advise's advice, is PreparedKept's.
func (d Postgres) PreparedKept(ctx context.Context, db *bun.DB) (bool, error) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := db.Conn(pctx)
	if err != nil {
		return false, fmt.Errorf("bunqueue: pooler probe: %w", err)
	}
	defer conn.Close()
	var first int64
	if err := conn.QueryRowContext(pctx, pidQuery).Scan(&first); err != nil {
		return false, d.probeFailed(err)
	}
	// A text of its own: no other client prepared it on any session.
	mark := make([]byte, 8)
	_, _ = rand.Read(mark)
	st, err := conn.PrepareContext(pctx, pidQuery+" /* bunqueue pooler probe "+hex.EncodeToString(mark)+" */")
	if err != nil {
		return d.probeLost(err)
	}
	defer st.Close()
	if err := st.QueryRowContext(pctx).Scan(&first); err != nil {
		return d.probeLost(err)
	}
	for range pooledTries {
		other, again, err := d.handOff(pctx, db, st)
		switch {
		case err != nil:
			return d.probeLost(err)
		case other == first || again != first:
			return true, nil // another session, and the statement ran there
		}
	}
	return true, nil
}

// handOff reads the backend's pid in a transaction of a connection of db
// other than st's, which a pooler in transaction mode gives the server
// session st's connection used last, then runs st, which returns the pid
// of the session st's connection has now.
func (d Postgres) handOff(ctx context.Context, db *bun.DB, st *sql.Stmt) (other, again int64, err error) {
	tx, err := db.BeginTx(ctx, d.TxOptions())
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if err := tx.QueryRowContext(ctx, pidQuery).Scan(&other); err != nil {
		return 0, 0, err
	}
	err = st.QueryRowContext(ctx).Scan(&again)
	return other, again, err
}

// probeLost is PreparedKept's result after err: false for a lost
// prepared statement of the probe's own, an error otherwise.
func (d Postgres) probeLost(err error) (bool, error) {
	if d.StatementLost(err) && !d.driverCache(err) {
		return false, nil
	}
	return false, d.probeFailed(err)
}

// probeFailed wraps an error of PreparedKept's.
func (d Postgres) probeFailed(err error) error {
	return d.Advise(fmt.Errorf("bunqueue: pooler probe: %w", err))
}
