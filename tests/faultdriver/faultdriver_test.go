package faultdriver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// server is one the tests run on: MySQL (or MariaDB) and PostgreSQL.
type server struct {
	name, dsn, driver string
}

func (s server) pg() bool { return s.name == "postgres" }

// arg is the placeholder of the n-th argument.
func (s server) arg(n int) string {
	if s.pg() {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// eachServer runs f as a parallel subtest on each server.
func eachServer(t *testing.T, f func(t *testing.T, s server)) {
	for _, s := range []server{{"mysql", dbtest.DSN(), "mysql"}, {"postgres", dbtest.PGDSN(), "pgx"}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s)
		})
	}
}

// open returns a *sql.DB over the injector and a plain one, and a fresh
// table t (id INT PRIMARY KEY) dropped when the test ends.
func open(t *testing.T, s server, in *faultdriver.Injector) (faulty, plain *sql.DB, table string) {
	t.Helper()
	faulty, err := in.Open(s.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = faulty.Close() })
	plain, err = sql.Open(s.driver, s.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	table = dbtest.Name("bq_rel_fd")
	ddl := "CREATE TABLE " + table + " (id INT PRIMARY KEY)"
	if !s.pg() {
		ddl += " ENGINE=InnoDB"
	}
	_, err = plain.Exec(ddl)
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

// code returns the server error's code in err: the MySQL error number,
// or PostgreSQL's SQLSTATE.
func code(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return strconv.Itoa(int(me.Number))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// inTx reports whether the session of q has a transaction open and
// usable: MySQL's @@in_transaction; on PostgreSQL, a statement fails with
// 25P02 in an aborted one, and txid_current_if_assigned() is not NULL in a
// transaction that wrote.
func inTx(t *testing.T, s server, ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (open, aborted bool) {
	t.Helper()
	if !s.pg() {
		var n int
		require.NoError(t, q.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&n))
		return n == 1, false
	}
	var id sql.NullInt64
	err := q.QueryRowContext(ctx, "SELECT txid_current_if_assigned()").Scan(&id)
	if code(err) == "25P02" {
		return true, true
	}
	require.NoError(t, err)
	return id.Valid, false
}

// An injected deadlock inside a transaction ends the transaction on the
// server, as a real one does; a lock wait timeout fails only the
// statement on MySQL. On PostgreSQL both abort the transaction, as every
// error there does.
func TestDeadlockRollsBackLockWaitTimeoutDoesNot(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		in := faultdriver.NewInjector(1)
		db, plain, table := open(t, s, in)
		in.Add(faultdriver.Rule{Step: "marker", Match: faultdriver.Contains(nil, "bq_marker"),
			Faults: []faultdriver.Fault{faultdriver.Deadlock, faultdriver.LockWaitTimeout}, Every: 1})
		deadlock, timeout := "1213", "1205"
		if s.pg() {
			deadlock, timeout = "40P01", "55P03"
		}

		ctx := t.Context()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "SELECT 1 /* bq_marker */")
		require.Equal(t, deadlock, code(err), "%v", err)
		open, aborted := inTx(t, s, ctx, tx)
		require.Equal(t, s.pg(), open && aborted, "PostgreSQL aborted the deadlock victim's transaction")
		require.Equal(t, s.pg(), open, "MySQL rolled back the deadlock victim's transaction")
		require.NoError(t, tx.Rollback())
		require.Zero(t, rows(t, plain, table))

		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)")
		require.NoError(t, err)
		_, err = tx.QueryContext(ctx, "SELECT 1 /* bq_marker */")
		require.Equal(t, timeout, code(err), "%v", err)
		open, aborted = inTx(t, s, ctx, tx)
		require.True(t, open, "a lock wait timeout leaves the transaction open")
		require.Equal(t, s.pg(), aborted, "and, on PostgreSQL, aborted")
		if s.pg() {
			require.Error(t, tx.Commit(), "an aborted transaction does not commit")
			require.Zero(t, rows(t, plain, table))
		} else {
			require.NoError(t, tx.Commit())
			require.Equal(t, 1, rows(t, plain, table))
		}
		require.Equal(t, 2, in.Total())
	})
}

// A fault injected into COMMIT ends the transaction: nothing commits, and
// the connection goes back to the pool with no transaction open.
func TestServerErrorAtCommit(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		in := faultdriver.NewInjector(1)
		db, plain, table := open(t, s, in)
		db.SetMaxOpenConns(1)
		in.Add(faultdriver.Rule{Step: "commit", Match: func(st faultdriver.Stmt) bool { return st.Op == faultdriver.OpCommit },
			Faults: []faultdriver.Fault{faultdriver.Deadlock, faultdriver.LockWaitTimeout}, Every: 1})
		ctx := t.Context()
		for i, want := range [][2]string{{"1213", "40P01"}, {"1205", "55P03"}} {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d)", table, i+1))
			require.NoError(t, err)
			err = tx.Commit()
			require.Equal(t, want[map[bool]int{false: 0, true: 1}[s.pg()]], code(err), "%v", err)
			open, _ := inTx(t, s, ctx, db)
			require.False(t, open, "the failed COMMIT ended the transaction")
		}
		require.Zero(t, rows(t, plain, table))
		_, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (9)")
		require.NoError(t, err)
		require.Equal(t, 1, rows(t, plain, table))
	})
}

// A connection dropped before the statement is sent: outside a
// transaction database/sql retries on another connection (the statement
// runs once); inside one, the statement fails and the server rolls the
// transaction back.
func TestDropBefore(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		in := faultdriver.NewInjector(1)
		db, plain, table := open(t, s, in)
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
	})
}

// cutErr checks that err is the error of a connection cut after the
// statement was sent.
func cutErr(t *testing.T, s server, err error, msg string) {
	t.Helper()
	if s.pg() {
		// pgx's error: the read's (wrapping ErrCut), or, once it has
		// closed the connection, "conn closed".
		require.Error(t, err, msg)
		require.NotErrorIs(t, err, driver.ErrBadConn, msg)
	} else {
		require.ErrorIs(t, err, mysql.ErrInvalidConn, msg)
	}
}

// A connection cut after the statement was sent: the client gets an
// error, the server ran the statement. A COMMIT cut that way did commit;
// a COMMIT whose connection dropped before it was sent did not.
func TestDropAfterRunsTheStatement(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		in := faultdriver.NewInjector(1)
		db, plain, table := open(t, s, in)
		in.KeepTxStatements(true)
		in.Add(
			faultdriver.Rule{Step: "autocommit insert", Match: faultdriver.Contains([]faultdriver.Op{faultdriver.OpExec}, "VALUES (1)"),
				Faults: []faultdriver.Fault{faultdriver.DropAfter}, Every: 1, Limit: 1},
			faultdriver.Rule{Step: "commit", Match: func(s faultdriver.Stmt) bool { return s.Op == faultdriver.OpCommit },
				Faults: []faultdriver.Fault{faultdriver.DropAfter, faultdriver.DropBefore}, Every: 1},
			faultdriver.Rule{Step: "prepared", Match: faultdriver.Contains([]faultdriver.Op{faultdriver.OpQuery}, "RETURNING"),
				Faults: []faultdriver.Fault{faultdriver.DropAfter}, Every: 1},
		)
		ctx := t.Context()

		_, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
		if s.pg() {
			// pgx (v5.12) reports an Exec whose reply was lost as safe to
			// retry (driver.ErrBadConn): database/sql runs it again on
			// another connection, where it finds the row it inserted.
			require.Equal(t, "23505", code(err), "%v", err)
		} else {
			cutErr(t, s, err, "the reply was never read")
		}
		waitRows(t, plain, table, 1, "the statement ran on the server")

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)")
		require.NoError(t, err)
		cutErr(t, s, tx.Commit(), "the COMMIT's reply was never read")
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

		// A statement with arguments, which pgx prepares in a round trip
		// of its own before it executes it (the MySQL driver has
		// database/sql prepare it): the cut comes after the execution
		// was sent.
		if s.pg() {
			_, err = db.QueryContext(ctx, "INSERT INTO "+table+" VALUES ("+s.arg(1)+") RETURNING id", 4)
			cutErr(t, s, err, "the reply was never read")
			waitRows(t, plain, table, 3, "the prepared statement ran on the server")
		}
	})
}

func waitRows(t *testing.T, db *sql.DB, table string, want int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return rows(t, db, table) == want }, 5*time.Second, 10*time.Millisecond, msg)
}

// The registry lists the live connections with their server ids, and a
// session statement reaches connections that are already open.
func TestConnsAndSession(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		in := faultdriver.NewInjector(1)
		db, plain, _ := open(t, s, in)
		ctx := t.Context()
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		idSQL, setTZ, showTZ, wantTZ, kill := "SELECT CONNECTION_ID()", "SET time_zone = '-05:00'", "SELECT @@session.time_zone", "-05:00", "KILL ?"
		if s.pg() {
			idSQL, setTZ, showTZ, wantTZ, kill = "SELECT pg_backend_pid()", "SET TimeZone = 'America/Chicago'", "SHOW TimeZone", "America/Chicago", "SELECT pg_terminate_backend($1)"
		}
		var id int64
		require.NoError(t, conn.QueryRowContext(ctx, idSQL).Scan(&id))
		found := false
		for _, c := range in.Conns() {
			found = found || c.ID == id
		}
		require.True(t, found, "connection %d is in the registry %v", id, in.Conns())

		in.SetSession(setTZ)
		var tz string
		require.NoError(t, conn.QueryRowContext(ctx, showTZ).Scan(&tz))
		require.Equal(t, wantTZ, tz)

		_, err = plain.ExecContext(ctx, kill, id)
		require.NoError(t, err)
		if s.pg() {
			time.Sleep(100 * time.Millisecond) // pg_terminate_backend only signals the backend
		}
		_, err = conn.ExecContext(context.Background(), "SELECT 1")
		require.Error(t, err, "the connection was killed on the server")
	})
}
