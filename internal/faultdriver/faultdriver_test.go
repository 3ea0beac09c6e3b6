package faultdriver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/dbtest"
	"github.com/bunqueue/bunqueue/internal/faultdriver"
)

// open returns a *sql.DB over the injector and a plain one, and a fresh
// table t (id INT PRIMARY KEY) dropped when the test ends.
func open(t *testing.T, in *faultdriver.Injector) (faulty, plain *sql.DB, table string) {
	t.Helper()
	faulty, err := in.Open(dbtest.DSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = faulty.Close() })
	plain, err = sql.Open("mysql", dbtest.DSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	table = dbtest.Name("bq_rel_fd")
	_, err = plain.Exec("CREATE TABLE " + table + " (id INT PRIMARY KEY) ENGINE=InnoDB")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = plain.Exec("DROP TABLE IF EXISTS " + table) })
	return faulty, plain, table
}

func rows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	return n
}

func mysqlErr(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// An injected deadlock inside a transaction ends the transaction on the
// server, as a real one does; a lock wait timeout fails only the
// statement.
func TestDeadlockRollsBackLockWaitTimeoutDoesNot(t *testing.T) {
	t.Parallel()
	in := faultdriver.NewInjector(1)
	db, plain, table := open(t, in)
	in.Add(faultdriver.Rule{Step: "marker", Match: faultdriver.Contains(nil, "bq_marker"),
		Faults: []faultdriver.Fault{faultdriver.Deadlock, faultdriver.LockWaitTimeout}, Every: 1})

	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "SELECT 1 /* bq_marker */")
	require.Equal(t, uint16(1213), mysqlErr(err))
	var inTx int
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTx))
	require.Zero(t, inTx, "the deadlock victim's transaction was rolled back")
	require.NoError(t, tx.Rollback())
	require.Zero(t, rows(t, plain, table))

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)")
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "SELECT 1 /* bq_marker */")
	require.Equal(t, uint16(1205), mysqlErr(err))
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTx))
	require.Equal(t, 1, inTx, "a lock wait timeout leaves the transaction open")
	require.NoError(t, tx.Commit())
	require.Equal(t, 1, rows(t, plain, table))
	require.Equal(t, 2, in.Total())
}

// A connection dropped before the statement is sent: outside a
// transaction database/sql retries on another connection (the statement
// runs once); inside one, the statement fails and the server rolls the
// transaction back.
func TestDropBefore(t *testing.T) {
	t.Parallel()
	in := faultdriver.NewInjector(1)
	db, plain, table := open(t, in)
	in.Add(faultdriver.Rule{Step: "insert", Match: faultdriver.Contains([]faultdriver.Op{faultdriver.OpExec}, "INSERT INTO "+table),
		Faults: []faultdriver.Fault{faultdriver.DropBefore}, Every: 2})
	ctx := t.Context()

	_, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)") // 1st match: no fault
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)") // 2nd: dropped, retried (3rd: no fault)
	require.NoError(t, err, "database/sql retries a statement whose connection was dead before it was sent")
	require.Equal(t, 2, rows(t, plain, table))

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (3)") // 4th: dropped
	require.ErrorIs(t, err, driver.ErrBadConn)
	require.Error(t, tx.Commit())
	require.Equal(t, 2, rows(t, plain, table))
	require.Equal(t, 2, in.Total())
}

// A connection cut after the statement was sent: the client gets an
// error, the server ran the statement. A COMMIT cut that way did commit;
// a COMMIT whose connection dropped before it was sent did not.
func TestDropAfterRunsTheStatement(t *testing.T) {
	t.Parallel()
	in := faultdriver.NewInjector(1)
	db, plain, table := open(t, in)
	in.KeepTxStatements(true)
	in.Add(
		faultdriver.Rule{Step: "autocommit insert", Match: faultdriver.Contains([]faultdriver.Op{faultdriver.OpExec}, "VALUES (1)"),
			Faults: []faultdriver.Fault{faultdriver.DropAfter}, Every: 1},
		faultdriver.Rule{Step: "commit", Match: func(s faultdriver.Stmt) bool { return s.Op == faultdriver.OpCommit },
			Faults: []faultdriver.Fault{faultdriver.DropAfter, faultdriver.DropBefore}, Every: 1},
	)
	ctx := t.Context()

	_, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
	require.ErrorIs(t, err, mysql.ErrInvalidConn, "the reply was never read")
	waitRows(t, plain, table, 1, "the statement ran on the server")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)")
	require.NoError(t, err)
	require.ErrorIs(t, tx.Commit(), mysql.ErrInvalidConn)
	waitRows(t, plain, table, 2, "a COMMIT cut after it was sent commits")

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (3)")
	require.NoError(t, err)
	require.ErrorIs(t, tx.Commit(), driver.ErrBadConn)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 2, rows(t, plain, table), "a COMMIT never sent does not commit")

	log := in.Log()
	require.Len(t, log, 3)
	require.Equal(t, []string{"INSERT INTO " + table + " VALUES (2)"}, log[1].TxStmts, "the injection carries its transaction's statements")
}

func waitRows(t *testing.T, db *sql.DB, table string, want int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return rows(t, db, table) == want }, 5*time.Second, 10*time.Millisecond, msg)
}

// The registry lists the live connections with their server ids, and a
// session statement reaches connections that are already open.
func TestConnsAndSession(t *testing.T) {
	t.Parallel()
	in := faultdriver.NewInjector(1)
	db, plain, _ := open(t, in)
	ctx := t.Context()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	found := false
	for _, c := range in.Conns() {
		found = found || c.ID == id
	}
	require.True(t, found, "connection %d is in the registry %v", id, in.Conns())

	in.SetSession("SET time_zone = '-05:00'")
	var tz string
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&tz))
	require.Equal(t, "-05:00", tz)

	_, err = plain.ExecContext(ctx, "KILL ?", id)
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "SELECT 1")
	require.Error(t, err, "the connection was killed on the server")
}
