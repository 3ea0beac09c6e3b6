package sqldialect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// probeTable creates a fresh (id INT PRIMARY KEY) table with the given
// engine and drops it when the test ends.
func probeTable(t *testing.T, db *bun.DB, engine string) string {
	t.Helper()
	name := dbtest.Name("bq_test_probe_" + engine)
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS "+name,
		"CREATE TABLE "+name+" (id INT NOT NULL PRIMARY KEY) ENGINE="+engine)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

func TestForPicksMySQL(t *testing.T) {
	t.Parallel()
	d, err := sqldialect.For(dbtest.OpenMySQL(t, 0))
	require.NoError(t, err)
	require.Equal(t, sqldialect.MySQL{}, d)
	require.Equal(t, "UPDATE SKIP LOCKED", d.SkipLocked())
}

func TestProbePassesOnInnoDB(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	table := probeTable(t, db, "InnoDB")

	require.NoError(t, sqldialect.MySQL{}.Probe(t.Context(), db, table))
	require.GreaterOrEqual(t, db.Stats().OpenConnections, 2, "the probe must use two connections")

	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	require.Equal(t, 2, n, "the probe inserts rows 1 and 2")
	require.NoError(t, sqldialect.MySQL{}.Probe(t.Context(), db, table), "the probe can run again on its rows")
}

func TestProbeRefusesMyISAM(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	table := probeTable(t, db, "MyISAM")

	err := sqldialect.MySQL{}.Probe(t.Context(), db, table)
	require.ErrorContains(t, err, "returned a row another transaction had locked: it ignores SKIP LOCKED")
	require.ErrorContains(t, err, "MySQL 8.0.1+ or MariaDB 10.6+, InnoDB tables")
	require.GreaterOrEqual(t, db.Stats().OpenConnections, 2, "the probe must use two connections")
}

func TestProbeOnAMissingTable(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	table := dbtest.Name("bq_test_probe_missing")
	err := sqldialect.MySQL{}.Probe(t.Context(), db, table)
	require.ErrorContains(t, err, "startup probe")
	require.True(t, dbtest.IsMySQLError(errors.Unwrap(err), 1146), "table doesn't exist: %v", err)
}

func TestMySQLMissingColumn(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	_, noColumn := db.ExecContext(t.Context(), "SELECT no_such_column FROM information_schema.TABLES")
	_, noTable := db.ExecContext(t.Context(), "SELECT 1 FROM "+dbtest.Name("bq_test_no_such_table"))
	my := sqldialect.MySQL{}
	require.True(t, my.MissingColumn(noColumn), "%v", noColumn)
	require.True(t, my.MissingColumn(fmt.Errorf("wrapped: %w", noColumn)))
	require.False(t, my.MissingColumn(noTable), "%v", noTable)
	require.True(t, my.MissingTable(noTable), "%v", noTable)
	require.False(t, my.MissingColumn(nil))
}

func TestCheckServerPasses(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	require.NoError(t, sqldialect.MySQL{}.CheckServer(t.Context(), db, tables.Default.Probe))

	var engine string
	require.NoError(t, db.QueryRow("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
		tables.Default.Probe).Scan(&engine))
	require.Equal(t, "InnoDB", engine)
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	var database string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&database))

	innodb := probeTable(t, db, "InnoDB")
	myisam := probeTable(t, db, "MyISAM")
	view := dbtest.Name("bq_test_checktable_view")
	dbtest.Exec(t, db, "CREATE VIEW "+view+" AS SELECT id FROM "+innodb)
	t.Cleanup(func() { _, _ = db.Exec("DROP VIEW IF EXISTS " + view) })
	missing := dbtest.Name("bq_test_checktable_missing")

	tests := []struct {
		name          string
		schema, table string
		want          string // "" for no error
	}{
		{"InnoDB", "", innodb, ""},
		{"InnoDB in a named schema", database, innodb, ""},
		{"missing", "", missing, "table " + missing + " does not exist"},
		{"missing schema", dbtest.Name("bq_no_such_db"), innodb, "table " + innodb + " does not exist"},
		{"MyISAM", "", myisam, "table " + myisam + " uses the MyISAM engine"},
		{"view", "", view, view + " is a view, not a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sqldialect.MySQL{}.CheckTable(t.Context(), db, tt.schema, tt.table)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// Refused tells a statement the server refused from a conflict, a kill or
// a lost connection.
func TestRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"too many prepared statements", &mysql.MySQLError{Number: 1461}, true},
		{"no such table, wrapped", fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1146}), true},
		{"deadlock", &mysql.MySQLError{Number: 1213}, false},
		{"lock wait timeout", &mysql.MySQLError{Number: 1205}, false},
		{"query killed", &mysql.MySQLError{Number: 1317}, false},
		{"connection killed", &mysql.MySQLError{Number: 1927}, false},
		{"server shutdown", &mysql.MySQLError{Number: 1053}, false},
		{"invalid connection", mysql.ErrInvalidConn, false},
		{"bad connection", driver.ErrBadConn, false},
		{"context deadline", context.DeadlineExceeded, false},
		{"a local error", errors.New("sql: Scan error on column index 0"), false},
		{"nil", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, sqldialect.MySQL{}.Refused(tt.err))
		})
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	timeout := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"deadlock", deadlock, true},
		{"lock wait timeout", timeout, true},
		{"wrapped deadlock", fmt.Errorf("claim: %w", deadlock), true},
		{"twice wrapped lock wait timeout", fmt.Errorf("a: %w", fmt.Errorf("b: %w", timeout)), true},
		{"joined", errors.Join(errors.New("other"), deadlock), true},
		{"record changed (MariaDB 11.6+)", &mysql.MySQLError{Number: 1020}, true},
		{"duplicate key", &mysql.MySQLError{Number: 1062}, false},
		{"syntax", &mysql.MySQLError{Number: 1064}, false},
		{"no such table", fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1146}), false},
		{"only the text of a deadlock", errors.New("Error 1213 (40001): Deadlock found when trying to get lock"), false},
		{"bad connection", driver.ErrBadConn, false},
		{"context deadline", context.DeadlineExceeded, false},
		{"no rows", sql.ErrNoRows, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, sqldialect.MySQL{}.Retryable(tt.err))
		})
	}
}

// TestRetryableOnRealServerErrors makes the server raise a lock wait
// timeout and a deadlock, and checks Retryable recognises what the driver
// returns.
func TestRetryableOnRealServerErrors(t *testing.T) {
	t.Parallel()
	table := probeTable(t, dbtest.OpenMySQL(t, 0), "InnoDB")
	dbtest.Exec(t, dbtest.OpenMySQL(t, 0), "INSERT INTO "+table+" (id) VALUES (1), (2)")

	// setup returns two transactions, each on a connection of its own pool,
	// and a function that locks row id of the table in one of them.
	setup := func(t *testing.T) (a, b bun.Tx, lock func(tx bun.Tx, id int) error) {
		t.Helper()
		begin := func() bun.Tx {
			tx, err := dbtest.OpenMySQL(t, 1).BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		}
		lock = func(tx bun.Tx, id int) error {
			_, err := tx.ExecContext(t.Context(), "SELECT id FROM "+table+" WHERE id = ? FOR UPDATE", id)
			return err
		}
		return begin(), begin(), lock
	}

	t.Run("lock wait timeout", func(t *testing.T) {
		a, b, lock := setup(t)
		require.NoError(t, lock(a, 1))
		_, err := b.ExecContext(t.Context(), "SET SESSION innodb_lock_wait_timeout = 1")
		require.NoError(t, err)
		err = lock(b, 1)
		require.True(t, dbtest.IsMySQLError(err, 1205), "want 1205, got %v", err)
		require.True(t, sqldialect.MySQL{}.Retryable(err))
		require.True(t, sqldialect.MySQL{}.Retryable(fmt.Errorf("wrapped: %w", err)))
	})

	t.Run("deadlock", func(t *testing.T) {
		a, b, lock := setup(t)
		require.NoError(t, lock(a, 1))
		require.NoError(t, lock(b, 2))
		// Each now asks for the other's row: whichever asks second closes
		// the cycle, and the server rolls one of them back at once; the
		// other then gets its row.
		results := make(chan error, 2)
		go func() { results <- lock(a, 2) }()
		go func() { results <- lock(b, 1) }()
		var errs []error
		for range 2 {
			select {
			case err := <-results:
				if err != nil {
					errs = append(errs, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no deadlock was detected")
			}
		}
		require.Len(t, errs, 1, "exactly one of the two is the victim: %v", errs)
		require.True(t, dbtest.IsMySQLError(errs[0], 1213), "want 1213, got %v", errs[0])
		require.True(t, sqldialect.MySQL{}.Retryable(errs[0]))
		require.True(t, sqldialect.MySQL{}.Retryable(fmt.Errorf("wrapped: %w", errs[0])))
	})
}

// TestCheckServerWithoutCreatePrivilege runs CheckServer as a user who may
// read and write the database's tables but not create tables, after an
// administrator has created the probe table. The error CheckServer gives
// without the table says "grant CREATE or create it yourself": creating it
// must be enough.
func TestCheckServerWithoutCreatePrivilege(t *testing.T) {
	t.Parallel()
	root := dbtest.OpenMySQL(t, 0)
	require.NoError(t, sqldialect.MySQL{}.CheckServer(t.Context(), root, tables.Default.Probe), "as an administrator: creates the probe table")

	var database string
	require.NoError(t, root.QueryRow("SELECT DATABASE()").Scan(&database))
	user, password := dbtest.Name("bq_user"), dbtest.Name("pw")
	if _, err := root.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'"); err != nil {
		t.Skipf("cannot create a database user to test with: %v", err)
	}
	t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	dbtest.Exec(t, root, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+database+"`.* TO '"+user+"'@'%'")

	cfg, err := mysql.ParseDSN(dbtest.DSN())
	require.NoError(t, err)
	cfg.User, cfg.Passwd = user, password
	sqldb, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	app := bun.NewDB(sqldb, root.Dialect())
	t.Cleanup(func() { _ = app.Close() })

	require.NoError(t, sqldialect.MySQL{}.CheckServer(t.Context(), app, tables.Default.Probe),
		"the probe table exists; a user without CREATE must pass")
}
