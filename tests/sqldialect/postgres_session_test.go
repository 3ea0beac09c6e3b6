package sqldialect_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// writes records what a client sends the server, one entry per write.
type writes struct {
	mu  sync.Mutex
	all [][]byte
}

func (w *writes) since(n int) [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.all[n:]...)
}

func (w *writes) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.all)
}

// recordingConn is a net.Conn whose writes are recorded.
type recordingConn struct {
	net.Conn
	w *writes
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	c.w.all = append(c.w.all, bytes.Clone(p))
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

// pgOpenRecorded opens a pool of one connection of pgx through a dialer
// that records what it sends.
func pgOpenRecorded(t *testing.T, dsn string) (*bun.DB, *writes) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	w := &writes{}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return recordingConn{Conn: c, w: w}, nil
	}
	sqldb := stdlib.OpenDB(*cfg)
	sqldb.SetMaxOpenConns(1)
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db, w
}

// A worker's BEGIN sets READ COMMITTED in one statement, one round trip,
// whatever the session's default, and leaves the session's default alone.
func TestPostgresTxOptionsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	require.Empty(t, pg.SessionSetup(), "nothing is set on the session")
	db, w := pgOpenRecorded(t, pgDSN("default_transaction_isolation=serializable"))
	conn, err := db.Conn(t.Context()) // a worker's own connection
	require.NoError(t, err)
	defer conn.Close()
	before := w.len()
	tx, err := conn.BeginTx(t.Context(), pg.TxOptions())
	require.NoError(t, err)
	sent := w.since(before)
	require.Len(t, sent, 1, "BEGIN is one write: %q", sent)
	require.Equal(t, byte('Q'), sent[0][0], "a simple query")
	require.Contains(t, string(sent[0]), "begin isolation level read committed")
	var level string
	require.NoError(t, tx.QueryRowContext(t.Context(), "SELECT current_setting('transaction_isolation')").Scan(&level))
	require.Equal(t, "read committed", level)
	require.NoError(t, tx.Commit())
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT current_setting('default_transaction_isolation')").Scan(&level))
	require.Equal(t, "serializable", level, "the session's default is untouched")
}

// EndTxSession ends a session from another connection while it runs a
// statement of the transaction it was read in, which releases its locks;
// a session that is gone is no error.
func TestPostgresEndTxSession(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 0)
	table := pgTable(t, db, "bq_test_pg_session", "id INT PRIMARY KEY")
	pgExec(t, db, "INSERT INTO "+table+" (id) VALUES (1)")

	tx := pgBegin(t, db)
	s, err := pg.TxSession(t.Context(), tx)
	require.NoError(t, err)
	require.True(t, s.Known())
	id, err := pg.SessionID(t.Context(), tx)
	require.NoError(t, err)
	require.Equal(t, id, s.ID)
	pgExec(t, tx, "SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE")
	done := make(chan error, 1)
	go func() {
		_, err := tx.ExecContext(context.Background(), "SELECT pg_sleep(30)")
		done <- err
	}()
	require.Eventually(t, func() bool {
		return pgCount(t, db, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ? AND query LIKE '%pg_sleep%' AND state = 'active'", s.ID) == 1
	}, 5*time.Second, 10*time.Millisecond, "the session sleeps")

	began := time.Now()
	require.NoError(t, pg.EndTxSession(t.Context(), db, s))
	select {
	case err := <-done:
		require.Error(t, err)
		require.False(t, pg.ClientSide(err), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the ended session's statement still runs")
	}
	require.Less(t, time.Since(began), 5*time.Second)
	require.Zero(t, pgCount(t, db, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?", s.ID), "the backend exited before EndTxSession returned")
	other := pgBegin(t, db)
	pgExec(t, other, "SET LOCAL lock_timeout = '5s'", "SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE")
	require.NoError(t, pg.EndTxSession(t.Context(), db, s), "ending a session that is gone")
}

// A session read in one transaction is not ended once it runs another:
// behind a pooler, that is another client's.
func TestPostgresEndTxSessionSparesTheNextTransaction(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 0)
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	first, err := conn.BeginTx(t.Context(), pg.TxOptions())
	require.NoError(t, err)
	s, err := pg.TxSession(t.Context(), first)
	require.NoError(t, err)
	require.NoError(t, first.Commit())

	next, err := conn.BeginTx(t.Context(), pg.TxOptions())
	require.NoError(t, err)
	defer func() { _ = next.Rollback() }()
	pgExec(t, next, "SELECT 1") // xact_start is set at its first statement
	require.NoError(t, pg.EndTxSession(t.Context(), db, s))
	pgExec(t, next, "SELECT 1")
	require.NoError(t, next.Commit(), "the next transaction on that session lives on")
	require.NoError(t, pg.EndTxSession(t.Context(), db, s), "nor an idle session")
	pgExec(t, conn, "SELECT 1")
	require.NoError(t, pg.EndTxSession(t.Context(), db, sqldialect.TxSession{}), "an unknown session is no error")
}

// Without track_activities pg_stat_activity does not show a session's
// transaction: CheckEndTxSession says so.
func TestPostgresCheckEndTxSession(t *testing.T) {
	t.Parallel()
	require.NoError(t, pg.CheckEndTxSession(t.Context(), pgOpen(t, 1)))
	err := pg.CheckEndTxSession(t.Context(), pgOpenDSN(t, pgDSN("track_activities=off"), 1))
	require.ErrorContains(t, err, "track_activities is off")
}

// StatementLost tells the server's errors of a named statement missing on
// the session or there already; Advise adds what to do to those of pgx's
// own statement cache only.
func TestPostgresStatementLostAndAdvise(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, missing := conn.ExecContext(t.Context(), "EXECUTE bq_no_such_statement")
	pgExec(t, conn, `PREPARE "stmtcache_bq_test" AS SELECT 1`, `PREPARE bq_test_mine AS SELECT 1`)
	_, cached := conn.ExecContext(t.Context(), `PREPARE "stmtcache_bq_test" AS SELECT 1`)
	_, mine := conn.ExecContext(t.Context(), `PREPARE bq_test_mine AS SELECT 1`)
	_, syntax := conn.ExecContext(t.Context(), "SELEC 1")
	pgExec(t, conn, "DEALLOCATE ALL")

	for _, err := range []error{missing, cached, mine} {
		require.True(t, pg.StatementLost(err), "%v", err)
	}
	require.False(t, pg.StatementLost(syntax), "%v", syntax)
	require.False(t, pg.StatementLost(nil))
	require.ErrorContains(t, pg.Advise(cached), "add default_query_exec_mode=exec")
	require.ErrorIs(t, pg.Advise(cached), cached)
	for _, err := range []error{missing, mine, syntax, nil} {
		require.Equal(t, err, pg.Advise(err))
	}
}

// PreparedKept: a connection of its own keeps its statements, directly
// and through PgBouncer's session mode; through its transaction mode they
// are lost; and pgx's own statement cache, there, is an error that says
// what to do.
func TestPostgresPreparedKept(t *testing.T) {
	t.Parallel()
	kept, err := pg.PreparedKept(t.Context(), pgOpen(t, 2))
	require.NoError(t, err)
	require.True(t, kept, "directly")

	kept, err = pg.PreparedKept(t.Context(), pgOpenDSN(t, dbtest.PgBouncerDSN(t, "test_session", false), 2))
	require.NoError(t, err)
	require.True(t, kept, "through PgBouncer's session mode")

	kept, err = pg.PreparedKept(t.Context(), pgOpenDSN(t, dbtest.PgBouncerDSN(t, "", false), 2))
	require.NoError(t, err)
	require.False(t, kept, "through PgBouncer's transaction mode")

	_, err = pg.PreparedKept(t.Context(), pgOpenDSN(t, dbtest.PgBouncerDSN(t, "", true), 2))
	require.ErrorContains(t, err, "add default_query_exec_mode=exec", "pgx's statement cache through PgBouncer's transaction mode")
}
