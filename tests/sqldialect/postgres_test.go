package sqldialect_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// pgDefaultDSN is used when BUNQUEUE_PG_DSN is not set.
const pgDefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var pg = sqldialect.Postgres{}

// pgDSN returns the PostgreSQL DSN the tests use, with extra runtime
// parameters ("key=value&…") if any.
func pgDSN(params string) string {
	dsn := os.Getenv("BUNQUEUE_PG_DSN")
	if dsn == "" {
		dsn = pgDefaultDSN
	}
	if params == "" {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// pgOpenDSN returns a *bun.DB over pgx's database/sql driver with its own
// pool of at most maxConns connections (0: unlimited), closed when the
// test ends.
func pgOpenDSN(t testing.TB, dsn string, maxConns int) *bun.DB {
	t.Helper()
	return dbtest.OpenPGDSN(t, dsn, maxConns)
}

// pgOpen is pgOpenDSN with the tests' DSN.
func pgOpen(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	return pgOpenDSN(t, pgDSN(""), maxConns)
}

// pgName returns a fresh name with the given prefix, for a test's own
// tables.
func pgName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// pgExec runs statements on db and fails the test on error.
func pgExec(t testing.TB, db bun.IDB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.ExecContext(context.Background(), s)
		require.NoError(t, err, s)
	}
}

// pgTable creates a fresh table with the given columns, named from
// prefix, and drops it when the test ends.
func pgTable(t testing.TB, db *bun.DB, prefix, cols string) string {
	t.Helper()
	name := pgName(prefix)
	pgExec(t, db, "CREATE TABLE "+name+" ("+cols+")")
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + name + " CASCADE") })
	return name
}

// pgCount runs query, a count, on db.
func pgCount(t testing.TB, db bun.IDB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), query, args...).Scan(&n), query)
	return n
}

// pgBegin begins a READ COMMITTED transaction, rolled back when the test
// ends.
func pgBegin(t testing.TB, db *bun.DB) bun.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// fieldError is an error like bun's pgdriver.Error, a value whose fields
// are read with Field.
type fieldError map[byte]string

func (e fieldError) Error() string       { return e['S'] + ": " + e['M'] + " (SQLSTATE=" + e['C'] + ")" }
func (e fieldError) Field(k byte) string { return e[k] }

func TestPostgresFor(t *testing.T) {
	t.Parallel()
	d, err := sqldialect.For(pgOpen(t, 1))
	require.NoError(t, err)
	require.Equal(t, pg, d)
	require.Equal(t, "NO KEY UPDATE SKIP LOCKED", d.SkipLocked())
	require.Equal(t, "FOR KEY SHARE", d.ShareLock())
	require.Empty(t, d.ForcePrimary())
	require.Equal(t, " ON CONFLICT DO NOTHING", d.SkipTakenKeys())
}

// A claim skips the rows another transaction holds; the unique-key read
// (ShareLock) does not wait for a claim's lock, where FOR SHARE would.
func TestPostgresSkipLocked(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 4)
	table := pgTable(t, db, "bq_test_pg_skip", "id INT PRIMARY KEY")
	pgExec(t, db, "INSERT INTO "+table+" (id) VALUES (1), (2), (3)")

	claim := func(tx bun.Tx) int {
		var ids []int
		q := tx.NewSelect().Table(table).Column("id").OrderExpr("id").Limit(1).For(pg.SkipLocked())
		require.Contains(t, q.String(), "FOR NO KEY UPDATE SKIP LOCKED")
		require.NoError(t, q.Scan(t.Context(), &ids))
		require.Len(t, ids, 1)
		return ids[0]
	}
	a, b := pgBegin(t, db), pgBegin(t, db)
	require.Equal(t, 1, claim(a))
	require.Equal(t, 2, claim(b), "row 1 is locked: skipped")

	c := pgBegin(t, db)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var id int
	require.NoError(t, c.QueryRowContext(ctx, "SELECT id FROM "+table+" WHERE id = 1 "+pg.ShareLock()).Scan(&id),
		"FOR KEY SHARE does not wait for a claim")
	pgExec(t, c, "SET LOCAL lock_timeout = '100ms'")
	err := c.QueryRowContext(ctx, "SELECT id FROM "+table+" WHERE id = 1 FOR SHARE").Scan(&id)
	require.True(t, pg.Retryable(err), "FOR SHARE waits for the claim: %v", err)
}

// Refused tells a statement the server refused from a conflict, a
// cancellation, a terminated session or a lost connection.
func TestPostgresRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"cached plan changed", &pgconn.PgError{Code: "0A000"}, true},
		{"no such prepared statement", fmt.Errorf("x: %w", &pgconn.PgError{Code: "26000"}), true},
		{"pgdriver no such table", fieldError{'C': "42P01"}, true},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, false},
		{"lock timeout", &pgconn.PgError{Code: "55P03"}, false},
		{"statement cancelled", &pgconn.PgError{Code: "57014"}, false},
		{"session terminated", &pgconn.PgError{Code: "57P01"}, false},
		{"connection failure", &pgconn.PgError{Code: "08006"}, false},
		{"bad connection", driver.ErrBadConn, false},
		{"a local error", errors.New("sql: Scan error on column index 0"), false},
		{"nil", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pg.Refused(tt.err))
		})
	}
}

func TestPostgresRetryable(t *testing.T) {
	t.Parallel()
	deadlock := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	timeout := &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"deadlock", deadlock, true},
		{"lock timeout", timeout, true},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"wrapped deadlock", fmt.Errorf("claim: %w", deadlock), true},
		{"twice wrapped lock timeout", fmt.Errorf("a: %w", fmt.Errorf("b: %w", timeout)), true},
		{"joined", errors.Join(errors.New("other"), deadlock), true},
		{"pgdriver deadlock", fieldError{'C': "40P01"}, true},
		{"wrapped pgdriver lock timeout", fmt.Errorf("x: %w", fieldError{'C': "55P03"}), true},
		{"duplicate key", &pgconn.PgError{Code: "23505"}, false},
		{"syntax", &pgconn.PgError{Code: "42601"}, false},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, false},
		{"pgdriver no such table", fieldError{'C': "42P01"}, false},
		{"only the text of a deadlock", errors.New("ERROR: deadlock detected (SQLSTATE 40P01)"), false},
		{"bad connection", driver.ErrBadConn, false},
		{"context deadline", context.DeadlineExceeded, false},
		{"no rows", sql.ErrNoRows, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pg.Retryable(tt.err))
		})
	}
}

// TestPostgresRetryableOnRealServerErrors makes the server raise a lock
// timeout and a deadlock, and checks Retryable recognises what the driver
// returns.
func TestPostgresRetryableOnRealServerErrors(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 0)
	// setup returns a function that locks row id (1 or 2) of a fresh
	// table in a transaction.
	setup := func(t *testing.T) func(tx bun.Tx, id int) error {
		table := pgTable(t, db, "bq_test_pg_retry", "id INT PRIMARY KEY")
		pgExec(t, db, "INSERT INTO "+table+" (id) VALUES (1), (2)")
		return func(tx bun.Tx, id int) error {
			_, err := tx.ExecContext(t.Context(), "SELECT id FROM "+table+" WHERE id = ? FOR UPDATE", id)
			return err
		}
	}

	t.Run("lock timeout", func(t *testing.T) {
		t.Parallel()
		lock := setup(t)
		a, b := pgBegin(t, db), pgBegin(t, db)
		require.NoError(t, lock(a, 1))
		pgExec(t, b, "SET LOCAL lock_timeout = '100ms'")
		err := lock(b, 1)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "55P03", pe.Code)
		require.True(t, pg.Retryable(err))
		require.True(t, pg.Retryable(fmt.Errorf("wrapped: %w", err)))
		require.False(t, pg.ClientSide(err))
	})

	t.Run("deadlock", func(t *testing.T) {
		t.Parallel()
		lock := setup(t)
		a, b := pgBegin(t, db), pgBegin(t, db)
		require.NoError(t, lock(a, 2))
		require.NoError(t, lock(b, 1))
		// Each now asks for the other's row: the server finds the cycle
		// after deadlock_timeout and rolls one of them back; the other
		// then gets its row.
		results := make(chan error, 2)
		go func() { results <- lock(a, 1) }()
		go func() { results <- lock(b, 2) }()
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
		var pe *pgconn.PgError
		require.ErrorAs(t, errs[0], &pe)
		require.Equal(t, "40P01", pe.Code)
		require.True(t, pg.Retryable(errs[0]))
		require.True(t, pg.Retryable(fmt.Errorf("wrapped: %w", errs[0])))
	})
}

func TestPostgresClientSide(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 2)

	// Errors from the server, the connection and the context.
	var scanned int
	scanErr := db.QueryRowContext(t.Context(), "SELECT 'not a number'").Scan(&scanned)
	require.Error(t, scanErr)
	_, serverErr := db.ExecContext(t.Context(), "SELECT 1/0")
	require.Error(t, serverErr)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, timeoutErr := db.ExecContext(ctx, "SELECT pg_sleep(5)")
	require.Error(t, timeoutErr)

	cctx, ccancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer ccancel()
	_, refusedErr := pgx.Connect(cctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	var ce *pgconn.ConnectError
	require.ErrorAs(t, refusedErr, &ce)
	closed, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	defer closed.Close()
	stdlibConnectErr := closed.PingContext(cctx)
	require.Error(t, stdlibConnectErr)

	// "conn busy": a pgconn error that wraps nothing.
	conn, err := pgx.Connect(cctx, pgDSN(""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(cctx, "SELECT 1")
	require.NoError(t, err)
	_, busyErr := conn.Exec(cctx, "SELECT 2")
	rows.Close()
	require.ErrorContains(t, busyErr, "conn busy")

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a value that does not scan", scanErr, true},
		{"wrapped", fmt.Errorf("claim: %w", scanErr), true},
		{"any other error", errors.New("bun: model does not fit"), true},
		{"server error", serverErr, false},
		{"pgx error", &pgconn.PgError{Code: "22012"}, false},
		{"pgdriver error", fieldError{'C': "22012"}, false},
		{"wrapped pgdriver error", fmt.Errorf("x: %w", fieldError{'C': "22012"}), false},
		{"statement timed out", timeoutErr, false},
		{"connection refused", refusedErr, false},
		{"connection refused through database/sql", stdlibConnectErr, false},
		{"ConnectError wrapping nothing else", &pgconn.ConnectError{}, false},
		{"conn busy", busyErr, false},
		{"joined conn busy", errors.Join(errors.New("a"), busyErr), false},
		{"net error", &net.OpError{Op: "read", Err: errors.New("i/o timeout")}, false},
		{"bad connection", driver.ErrBadConn, false},
		{"connection done", sql.ErrConnDone, false},
		{"transaction done", fmt.Errorf("x: %w", sql.ErrTxDone), false},
		{"EOF", io.EOF, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, false},
		{"cancelled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pg.ClientSide(tt.err), "%#v", tt.err)
		})
	}
}

func TestPostgresPrimaryKey(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 2)
	single := pgTable(t, db, "bq_test_pg_pk", "id BIGINT PRIMARY KEY, status TEXT")
	composite := pgTable(t, db, "bq_test_pg_pk", "id BIGINT, tenant TEXT, status TEXT, PRIMARY KEY (tenant, id)")
	none := pgTable(t, db, "bq_test_pg_pk", "id BIGINT UNIQUE")
	mixed := pgName("Bq_Test_Pg_PK")
	pgExec(t, db, `CREATE TABLE "`+mixed+`" ("Id" INT PRIMARY KEY)`)
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "` + mixed + `"`) })

	tests := []struct {
		name          string
		schema, table string
		want          []string
	}{
		{"single", "", single, []string{"id"}},
		{"composite, in key order", "", composite, []string{"tenant", "id"}},
		{"in a named schema", "public", composite, []string{"tenant", "id"}},
		{"none", "", none, nil},
		{"missing", "", pgName("bq_test_pg_pk_missing"), nil},
		{"missing schema", pgName("bq_no_such_schema"), single, nil},
		{"mixed case", "", mixed, []string{"Id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cols, err := pg.PrimaryKey(t.Context(), db, tt.schema, tt.table)
			require.NoError(t, err)
			require.Equal(t, tt.want, cols)
		})
	}
}

func TestPostgresCheckTable(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 2)
	table := pgTable(t, db, "bq_test_pg_check", "id INT PRIMARY KEY")
	parted := pgName("bq_test_pg_check_parted")
	pgExec(t, db, "CREATE TABLE "+parted+" (id INT, at DATE, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)")
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + parted) })
	view := pgName("bq_test_pg_check_view")
	pgExec(t, db, "CREATE VIEW "+view+" AS SELECT id FROM "+table)
	t.Cleanup(func() { _, _ = db.Exec("DROP VIEW IF EXISTS " + view) })
	matview := pgName("bq_test_pg_check_matview")
	pgExec(t, db, "CREATE MATERIALIZED VIEW "+matview+" AS SELECT id FROM "+table)
	t.Cleanup(func() { _, _ = db.Exec("DROP MATERIALIZED VIEW IF EXISTS " + matview) })
	seq := pgName("bq_test_pg_check_seq")
	pgExec(t, db, "CREATE SEQUENCE "+seq)
	t.Cleanup(func() { _, _ = db.Exec("DROP SEQUENCE IF EXISTS " + seq) })
	missing := pgName("bq_test_pg_check_missing")

	tests := []struct {
		name          string
		schema, table string
		want          string // "" for no error
	}{
		{"table", "", table, ""},
		{"table in a named schema", "public", table, ""},
		{"partitioned table", "", parted, ""},
		{"missing", "", missing, "table " + missing + " does not exist"},
		{"missing schema", pgName("bq_no_such_schema"), table, "table " + table + " does not exist"},
		{"upper case is another name", "", strings.ToUpper(table), "does not exist"},
		{"view", "", view, view + " is a view, not a table"},
		{"materialized view", "", matview, matview + " is a materialized view, not a table"},
		{"sequence", "", seq, seq + " is a sequence, not a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pg.CheckTable(t.Context(), db, tt.schema, tt.table)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// CheckServer creates the probe table where it is missing, also when
// processes race to, and proves with two connections that the server
// skips locked rows.
func TestPostgresCheckServer(t *testing.T) {
	t.Parallel()
	admin := pgOpen(t, 1)
	schema := pgName("bq_test_pg_schema")
	pgExec(t, admin, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	db := pgOpenDSN(t, pgDSN("search_path="+schema), 0)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pg.CheckServer(t.Context(), db, tables.Default.Probe) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, db.Stats().OpenConnections, 2, "the probe must use two connections")
	var n int
	require.NoError(t, admin.QueryRow("SELECT COUNT(*) FROM "+schema+"."+tables.Default.Probe).Scan(&n))
	require.Equal(t, 2, n, "the probe inserts rows 1 and 2")
	require.NoError(t, pg.CheckServer(t.Context(), db, tables.Default.Probe), "again, on its table")
	require.NoError(t, pg.CheckServer(t.Context(), pgOpen(t, 2), tables.Default.Probe), "in the default schema")
}

func TestPostgresProbe(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 0)
	table := pgTable(t, db, "bq_test_pg_probe", "id INT PRIMARY KEY")
	require.NoError(t, pg.Probe(t.Context(), db, table))
	require.NoError(t, pg.Probe(t.Context(), db, table), "the probe can run again on its rows")

	err := pg.Probe(t.Context(), db, pgName("bq_test_pg_probe_missing"))
	require.ErrorContains(t, err, "startup probe")
	require.True(t, pg.MissingTable(err), "%v", err)

	// The probe row held by another session: the probe reports it
	// rather than waiting for ever.
	holder := pgBegin(t, db)
	pgExec(t, holder, "SELECT id FROM "+table+" WHERE id = 2 FOR UPDATE")
	err = pg.Probe(t.Context(), db, table)
	require.ErrorContains(t, err, "skipped unlocked rows")
}

// pgPlanTable creates a fresh table with the seed article's columns and
// the given indexes (column lists), and drops it when the test ends.
func pgPlanTable(t testing.TB, db *bun.DB, prefix string, indexes ...string) string {
	t.Helper()
	name := pgTable(t, db, prefix, "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, status TEXT NOT NULL, retry_at TIMESTAMPTZ NULL, payload TEXT, note TEXT")
	for _, idx := range indexes {
		pgExec(t, db, "CREATE INDEX ON "+name+" "+idx)
	}
	return name
}

// pgFill inserts n rows into a table made by pgPlanTable, one in ten of
// them pending, and updates its statistics.
func pgFill(t testing.TB, db *bun.DB, table string, n int) {
	t.Helper()
	pgExec(t, db, fmt.Sprintf("INSERT INTO %s (status, retry_at) SELECT CASE WHEN i %% 10 = 0 THEN 'pending' ELSE 'done' END, "+
		"statement_timestamp() - i * INTERVAL '1 second' FROM generate_series(1, %d) AS i", table, n),
		"VACUUM ANALYZE "+table)
}

// The plans of the seed article's queue query, with the seed's index and
// with one that serves it, and of other reads, over thousands of rows.
func TestPostgresExplain(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 4)
	seed := pgPlanTable(t, db, "bq_test_pg_plan_seed", "(status, retry_at)")
	good := pgPlanTable(t, db, "bq_test_pg_plan_good", "(status, id)")
	pgFill(t, db, seed, 10000)
	pgFill(t, db, good, 10000)

	tests := []struct {
		name  string
		query string // %s is the table
		table string
		force string   // settings to SET LOCAL first, if any, separated by ", "
		want  []string // the problems, in any order
		or    []string // other problems the planner may choose instead
	}{
		{"seed index: the primary key filtered, or a sort", "SELECT t.id FROM %s AS t WHERE (status = 'pending') ORDER BY id LIMIT 100", seed, "",
			[]string{"a full index scan of t (%s_pkey)"}, []string{"a sort"}},
		{"matching index", "SELECT t.id FROM %s AS t WHERE (status = 'pending') ORDER BY id LIMIT 100", good, "", nil, nil},
		{"matching index, as bun renders it", `SELECT "t"."id" FROM "%s" AS "t" WHERE (status = 'pending') ORDER BY "t"."id" LIMIT 100`, good, "", nil, nil},
		{"matching index and a range", "SELECT t.id FROM %s AS t WHERE (status = 'pending') AND ((retry_at IS NULL) OR (retry_at <= statement_timestamp())) ORDER BY id LIMIT 100", good, "", nil, nil},
		{"unindexed column in primary key order", "SELECT t.id FROM %s AS t WHERE (note = 'x') ORDER BY id LIMIT 100", good, "enable_seqscan = off, enable_sort = off", []string{"a full index scan of t (%s_pkey)"}, nil},
		{"unindexed column", "SELECT t.id FROM %s AS t WHERE (note = 'x') LIMIT 100", good, "", []string{"a full table scan of t"}, nil},
		{"unindexed column, sorted", "SELECT t.id FROM %s AS t WHERE (note = 'x') ORDER BY retry_at LIMIT 100", good, "", []string{"a full table scan of t", "a sort"}, nil},
		{"sorted by an unindexed column", "SELECT t.id FROM %s AS t ORDER BY payload LIMIT 100", good, "", []string{"a sort"}, nil},
		{"sorted after an index's prefix", "SELECT t.id FROM %s AS t ORDER BY status, payload LIMIT 100", good, "", []string{"a sort"}, nil},
		{"no condition: stops at the limit", "SELECT t.id FROM %s AS t ORDER BY id LIMIT 100", good, "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var idb bun.IDB = db
			if tt.force != "" {
				tx := pgBegin(t, db)
				for _, f := range strings.Split(tt.force, ", ") {
					pgExec(t, tx, "SET LOCAL "+f)
				}
				idb = tx
			}
			plan, err := pg.Explain(t.Context(), idb, fmt.Sprintf(tt.query, tt.table))
			require.NoError(t, err)
			t.Logf("plan: %s", plan)
			require.NotEmpty(t, plan.Steps)
			expand := func(problems []string) []string {
				out := make([]string, len(problems))
				for i, p := range problems {
					if strings.Contains(p, "%s") {
						p = fmt.Sprintf(p, tt.table)
					}
					out[i] = p
				}
				return out
			}
			want := expand(tt.want)
			if tt.or != nil && len(plan.Problems()) > 0 && plan.Problems()[0] == expand(tt.or)[0] {
				want = expand(tt.or)
			}
			require.ElementsMatch(t, want, plan.Problems(), "plan: %s", plan)
		})
	}

	t.Run("the steps and their text", func(t *testing.T) {
		plan, err := pg.Explain(t.Context(), db, fmt.Sprintf("SELECT t.id FROM %s AS t WHERE (note = 'x') ORDER BY retry_at LIMIT 100", good))
		require.NoError(t, err)
		require.Equal(t, "Limit", plan.Steps[0].Type)
		var scan sqldialect.PlanStep
		for _, s := range plan.Steps {
			if s.Table != "" {
				scan = s
			}
		}
		require.Equal(t, "t", scan.Table)
		require.Equal(t, "Seq Scan", scan.Type)
		require.Contains(t, scan.Extra, "Filter: (note = 'x'::text)")
		require.Contains(t, plan.String(), " | ")
		require.Contains(t, plan.String(), "t: Seq Scan rows=")
		require.Contains(t, plan.String(), "Sort Key: retry_at")
		// The caller names the table it knows in place of the alias.
		for i := range plan.Steps {
			if plan.Steps[i].Table == "t" {
				plan.Steps[i].Table = "jobs"
			}
		}
		require.ElementsMatch(t, []string{"a full table scan of jobs", "a sort"}, plan.Problems())
		require.Contains(t, plan.String(), "jobs: Seq Scan")
	})

	t.Run("an index scan", func(t *testing.T) {
		plan, err := pg.Explain(t.Context(), db, fmt.Sprintf("SELECT t.id FROM %s AS t WHERE (status = 'pending') AND (note IS NULL) ORDER BY id LIMIT 100", good))
		require.NoError(t, err)
		s := plan.Steps[len(plan.Steps)-1]
		require.Equal(t, good+"_status_id_idx", s.Key, "plan: %s", plan)
		require.Contains(t, s.Extra, "Index Cond: (status = 'pending'::text)")
		require.Contains(t, s.Extra, "Filter: (note IS NULL)")
		require.Empty(t, plan.Problems(), "a range of an index that filters is no full scan")
	})

	t.Run("errors", func(t *testing.T) {
		_, err := pg.Explain(t.Context(), db, "SELECT id FROM "+pgName("bq_test_pg_plan_missing"))
		require.True(t, pg.MissingTable(err), "%v", err)
		_, err = pg.Explain(t.Context(), db, fmt.Sprintf("SELECT id FROM %s WHERE no_such_column = 1", good))
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "42703", pe.Code)
	})
}

// A plan of two tables has a step for each scan.
func TestPostgresExplainJoin(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	a := pgPlanTable(t, db, "bq_test_pg_plan_join", "(status, id)")
	b := pgPlanTable(t, db, "bq_test_pg_plan_join", "(note)")
	plan, err := pg.Explain(t.Context(), db,
		fmt.Sprintf("SELECT a.id FROM %s AS a JOIN %s AS b ON b.id = a.id WHERE a.status = 'x' AND b.payload = 'y' ORDER BY a.id LIMIT 10", a, b))
	require.NoError(t, err)
	var tables []string
	for _, s := range plan.Steps {
		if s.Table != "" {
			tables = append(tables, s.Table)
		}
	}
	require.ElementsMatch(t, []string{"a", "b"}, tables, "plan: %s", plan)
}

func TestPostgresSuggestIndex(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	const jobs = `SELECT "j"."id" FROM "bq_test_pg_no_jobs" AS "j" WHERE (queue = 'default') AND (state = 0) AND (run_at <= statement_timestamp()) ORDER BY "priority", "run_at", "id" LIMIT 100`
	tests := []struct {
		name  string
		query string
		want  string // the columns of the index; "" when none can be derived
	}{
		{"seed, as bun renders it", `SELECT "e"."id" FROM "email" AS "e" WHERE (status = 'pending') ORDER BY "e"."id" LIMIT 100`, `("status", "id")`},
		{"jobs", jobs, `("queue", "state", "priority", "run_at", "id")`},
		{"qualified with the alias or the table", `SELECT "e"."id" FROM "email" AS "e" WHERE ("e".status = 'x') AND (email.kind = 'y') ORDER BY "e"."created_at" DESC LIMIT 100`,
			`("status", "kind", "created_at" DESC, "id")`},
		{"backslash ends no string", `SELECT id FROM email WHERE (note = 'a\') AND (s = 'it''s') ORDER BY id`, `("note", "s", "id")`},
		{"E strings escape", `SELECT id FROM email WHERE a = E'it\'s ORDER BY x' AND b = e'\\' ORDER BY id`, `("a", "b", "id")`},
		{"dollar quotes", `SELECT id FROM email WHERE a = $$x' ORDER BY y$$ AND b = $q$it's$q$ ORDER BY id`, `("a", "b", "id")`},
		{"a parameter", `SELECT id FROM email WHERE a = $1 ORDER BY id`, `("a", "id")`},
		{"# is an operator", "SELECT id FROM email WHERE a = 1 AND b # 2 = 3 ORDER BY id", `("a", "id")`},
		{"comments", "SELECT id FROM email /* a /* nested */ ORDER BY x */ WHERE a = 1 --ORDER BY y\n ORDER BY id", `("a", "id")`},
		{"unquoted names fold to lower case", "SELECT ID FROM email WHERE Status = 'x' ORDER BY Created_At", `("status", "created_at", "id")`},
		{"quoted names keep their case and quotes", `SELECT id FROM email WHERE "Odd""Name" = 1 ORDER BY id`, `("Odd""Name", "id")`},
		{"default null order", "SELECT id FROM email WHERE status = 'x' ORDER BY a NULLS LAST, b ASC NULLS LAST, c DESC NULLS FIRST", `("status", "a", "b", "c" DESC, "id")`},
		{"OFFSET and FETCH", "SELECT id FROM email WHERE status = 'x' ORDER BY id OFFSET 10 FETCH FIRST 5 ROWS ONLY", `("status", "id")`},
		{"locked", "select id from email where status = 'x' order by id asc limit 5 for no key update skip locked", `("status", "id")`},
		{"a cast is no constant", "SELECT id FROM email WHERE status = 'x'::text AND kind = 'y' ORDER BY id", `("kind", "id")`},
		{"IS NULL fixes no order", "SELECT id FROM email WHERE status = 'x' AND note IS NULL AND kind IN ('y') ORDER BY id", `("status", "kind", "id")`},

		{"another null order", "SELECT id FROM email WHERE status = 'x' ORDER BY created_at NULLS FIRST", ""},
		{"DESC NULLS LAST", "SELECT id FROM email WHERE status = 'x' ORDER BY created_at DESC NULLS LAST", ""},
		{"only the primary key", `SELECT "e"."id" FROM "email" AS "e" ORDER BY "e"."id" LIMIT 100`, ""},
		{"a lone dollar", "SELECT id FROM email WHERE status = $ ORDER BY id", ""},
		{"an unterminated dollar quote", "SELECT id FROM email WHERE status = $a$x ORDER BY id", ""},
		{"an unterminated nested comment", "SELECT id FROM email /* a /* b */ WHERE status = 'x' ORDER BY id", ""},
		{"an unterminated identifier", `SELECT id FROM email WHERE "status = 'x' ORDER BY id`, ""},
		{"DISTINCT ON", "SELECT DISTINCT ON (status) id FROM email WHERE status = 'x' ORDER BY status, id", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, alias := "email", "e"
			if tt.name == "jobs" {
				table, alias = "bq_test_pg_no_jobs", "j"
			}
			idx, ok, err := pg.SuggestIndex(t.Context(), db, tt.query, "", table, alias, []string{"id"})
			require.NoError(t, err)
			ddl := idx.Create
			if tt.want == "" {
				require.False(t, ok, "suggested %s", ddl)
				return
			}
			require.True(t, ok)
			require.Regexp(t, `^CREATE INDEX "`+table+`_[A-Za-z_]+" ON "`+table+`" `, ddl)
			require.Equal(t, tt.want, ddl[len(ddl)-len(tt.want):], ddl)
			require.Empty(t, idx.Existing, "no such table")
		})
	}

	t.Run("schema and long names", func(t *testing.T) {
		long := "a_very_long_column_name_that_goes_on_and_on"
		idx, ok, err := pg.SuggestIndex(t.Context(), db, "SELECT id FROM x WHERE "+long+" = 1 ORDER BY id", "app", "x", "x", []string{"id"})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, `CREATE INDEX "x_`+long+`_id" ON "app"."x" ("`+long+`", "id")`, idx.Create)
		idx, ok, err = pg.SuggestIndex(t.Context(), db, "SELECT id FROM x WHERE "+long+" = 1 AND b"+long+" = 2 ORDER BY id", "", "x", "x", []string{"id"})
		require.NoError(t, err)
		require.True(t, ok)
		name, _, _ := strings.Cut(strings.TrimPrefix(idx.Create, `CREATE INDEX "`), `"`)
		require.Len(t, name, 63, "the name is cut to PostgreSQL's limit: %s", idx.Create)
	})
}

// The index SuggestIndex derives from a query that sorts or scans serves
// it: created, it leaves nothing to warn about, and is found.
func TestPostgresSuggestIndexServesTheQuery(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 4)
	for _, where := range []string{
		"status = 'pending'",
		"note = 'x'",
		"status = 'pending' AND note IS NULL AND (retry_at IS NULL OR retry_at <= statement_timestamp())",
	} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			table := pgPlanTable(t, db, "bq_test_pg_suggest", "(status, retry_at)")
			pgFill(t, db, table, 10000)
			query := fmt.Sprintf(`SELECT "t"."id" FROM "%s" AS "t" WHERE %s ORDER BY "t"."id" LIMIT 100`, table, where)
			before, err := pg.Explain(t.Context(), db, query)
			require.NoError(t, err)
			require.NotEmpty(t, before.Problems(), "plan: %s", before)

			idx, ok, err := pg.SuggestIndex(t.Context(), db, query, "", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			require.Empty(t, idx.Existing, "the seed's index does not serve it")
			t.Log(idx.Create)
			pgExec(t, db, idx.Create, "ANALYZE "+table)
			after, err := pg.Explain(t.Context(), db, query)
			require.NoError(t, err)
			require.Empty(t, after.Problems(), "plan with %s: %s", idx.Create, after)

			again, ok, err := pg.SuggestIndex(t.Context(), db, query, "public", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			name, _, _ := strings.Cut(strings.TrimPrefix(idx.Create, `CREATE INDEX "`), `"`)
			require.Equal(t, name, again.Existing, "the index it made serves it")
		})
	}
}

// An existing index serves a query when it is a complete btree index
// whose key columns start with the equality columns in any order, then
// the ORDER BY's, all forwards or all backwards; the primary key's
// columns are not in it unless named.
func TestPostgresSuggestIndexFindsAServingIndex(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 6)
	const where = "status = 'pending' AND note = 'x' AND retry_at <= statement_timestamp()"
	tests := []struct {
		index  string // after CREATE INDEX ON table
		where  string
		order  string // "" for none
		serves bool
	}{
		{"(status, retry_at)", "status = 'pending'", "id", false},
		{"(status)", "status = 'pending'", "id", false},
		{"(status)", "status = 'pending'", "", true},
		{"(status, id)", "status = 'pending'", "id", true},
		{"(status, id)", "status = 'pending'", "id DESC", true},
		{"(status, id DESC)", "status = 'pending'", "id DESC", true},
		{"(status, id DESC)", "status = 'pending'", "id", true},
		{"(status, id NULLS FIRST)", "status = 'pending'", "id", false},
		{"(status, retry_at, id)", "status = 'pending'", "retry_at, id DESC", false},
		{"(status, retry_at DESC, id)", "status = 'pending'", "retry_at DESC, id", true},
		{"(status, retry_at DESC, id)", "status = 'pending'", "retry_at, id DESC", true},
		{"(retry_at, status)", "status = 'pending'", "id", false},
		{"(note, status, retry_at)", where, "retry_at", true},
		{"(status, note)", where, "retry_at", false},
		{"(status, note, retry_at)", where, "retry_at, id", false},
		{"(status, note, retry_at, id)", where, "retry_at, id", true},
		{"(status, note, lower(payload))", where, "lower", false},
		{"(status, id) WHERE note IS NULL", "status = 'pending'", "id", false},
		{"(status) INCLUDE (id)", "status = 'pending'", "id", false},
		{"USING hash (status)", "status = 'pending'", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.index+" "+tt.where+" ORDER BY "+tt.order, func(t *testing.T) {
			t.Parallel()
			table := pgPlanTable(t, db, "bq_test_pg_serving", tt.index)
			query := fmt.Sprintf(`SELECT "t"."id" FROM "%s" AS "t" WHERE %s`, table, tt.where)
			switch tt.order {
			case "lower":
				query += " ORDER BY payload"
			case "":
			default:
				query += " ORDER BY " + tt.order
			}
			idx, ok, err := pg.SuggestIndex(t.Context(), db, query+" LIMIT 100", "", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			if tt.serves {
				require.NotEmpty(t, idx.Existing)
			} else {
				require.Empty(t, idx.Existing)
			}
		})
	}
}

func TestPostgresInsertID(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	table := pgTable(t, db, "bq_test_pg_insert", "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, k TEXT UNIQUE, v TEXT NOT NULL")
	insert := func(k, v string) string {
		return "INSERT INTO " + table + " (k, v) VALUES (" + k + ", " + v + ")" + pg.SkipTakenKeys()
	}

	id, ok, err := pg.InsertID(t.Context(), db, insert("'a'", "'what?'"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Positive(t, id)
	id2, ok, err := pg.InsertID(t.Context(), db, insert("'b'", "'?'"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, id2, id)

	_, ok, err = pg.InsertID(t.Context(), db, insert("'a'", "'again'"))
	require.NoError(t, err)
	require.False(t, ok, "a taken unique key: skipped")

	_, _, err = pg.InsertID(t.Context(), db, insert("'c'", "NULL"))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "ON CONFLICT skips conflicts only")
	require.Equal(t, "23502", pe.Code)

	var v string
	require.NoError(t, db.QueryRow("SELECT v FROM "+table+" WHERE id = ?", id).Scan(&v))
	require.Equal(t, "what?", v, "the statement is sent as it is")
	tx := pgBegin(t, db)
	id3, ok, err := pg.InsertID(t.Context(), tx, insert("'d'", "'x'"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, id3, id2)
}

// Now, NowPlus and Time compare right through a timestamptz column whatever
// the session's TimeZone.
func TestPostgresTime(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	table := pgTable(t, db, "bq_test_pg_time", "id INT PRIMARY KEY, at TIMESTAMPTZ NOT NULL")
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	pgExec(t, conn, "SET TIME ZONE 'America/New_York'")

	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	require.Equal(t, "'2026-01-02 03:04:05.000006+00:00'", pg.Time(t0))
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	require.Equal(t, pg.Time(t0), pg.Time(t0.In(ny)), "rendered in UTC")
	require.Equal(t, "'2026-01-02 03:04:05+00:00'", pg.Time(t0.Truncate(time.Second)))

	now := time.Now()
	pgExec(t, conn,
		"INSERT INTO "+table+" (id, at) VALUES (1, "+pg.Time(t0)+")",
		"INSERT INTO "+table+" (id, at) VALUES (2, "+pg.Time(now.Add(-time.Hour))+")",
		"INSERT INTO "+table+" (id, at) VALUES (3, "+pg.Time(now.Add(time.Hour))+")",
		"INSERT INTO "+table+" (id, at) VALUES (4, "+pg.NowPlus(-time.Hour)+")",
		"INSERT INTO "+table+" (id, at) VALUES (5, "+pg.NowPlus(time.Hour)+")",
		"INSERT INTO "+table+" (id, at) VALUES (6, "+pg.Now()+")")
	var at time.Time
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT at FROM "+table+" WHERE id = 1").Scan(&at))
	require.True(t, t0.Equal(at), "%s read back as %s", t0, at)
	var n int
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table+" WHERE at = "+pg.Time(t0)).Scan(&n))
	require.Equal(t, 1, n)

	var due []int
	rows, err := conn.QueryContext(t.Context(), "SELECT id FROM "+table+" WHERE at <= "+pg.Now()+" ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id int
		require.NoError(t, rows.Scan(&id))
		due = append(due, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{1, 2, 4, 6}, due)

	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT at FROM "+table+" WHERE id = 6").Scan(&at))
	require.WithinDuration(t, time.Now(), at, 5*time.Second, "the server's clock")

	for _, d := range []time.Duration{0, time.Microsecond, -time.Microsecond, 90*time.Minute + time.Microsecond, -1500 * time.Millisecond,
		30 * 24 * time.Hour, -200 * 365 * 24 * time.Hour, 1<<62 - 1} {
		var micros int64
		require.NoError(t, conn.QueryRowContext(t.Context(),
			"SELECT (EXTRACT(EPOCH FROM ("+pg.NowPlus(d)+") - "+pg.Now()+") * 1000000)::bigint").Scan(&micros))
		require.Equal(t, d.Microseconds(), micros, "NowPlus(%s)", d)
	}

	// The statement's time, not the transaction's.
	tx, err := conn.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var first, second time.Time
	require.NoError(t, tx.QueryRowContext(t.Context(), "SELECT "+pg.Now()).Scan(&first))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tx.QueryRowContext(t.Context(), "SELECT "+pg.Now()).Scan(&second))
	require.GreaterOrEqual(t, second.Sub(first), 40*time.Millisecond)
}

func TestPostgresMaxStatement(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	n, err := pg.MaxStatement(t.Context(), db)
	require.NoError(t, err)
	require.Equal(t, 64<<20, n)

	// A statement of that size goes through.
	prefix, suffix := "SELECT length('", "')"
	stmt := prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	require.Len(t, stmt, n)
	var got int
	require.NoError(t, db.QueryRowContext(t.Context(), stmt).Scan(&got))
	require.Equal(t, n-len(prefix)-len(suffix), got)
}

func TestPostgresMissingTable(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 1)
	_, missing := db.Exec("SELECT 1 FROM " + pgName("bq_test_pg_missing"))
	_, noSchema := db.Exec("SELECT 1 FROM " + pgName("bq_no_such_schema") + ".t")
	_, noColumn := db.Exec("SELECT no_such_column FROM pg_class")
	_, syntax := db.Exec("SELEC 1")
	require.True(t, pg.MissingTable(missing), "%v", missing)
	require.True(t, pg.MissingTable(fmt.Errorf("wrapped: %w", missing)))
	require.True(t, pg.MissingTable(noSchema), "%v", noSchema)
	require.True(t, pg.MissingTable(fieldError{'C': "42P01"}))
	require.False(t, pg.MissingTable(noColumn), "%v", noColumn)
	require.False(t, pg.MissingTable(syntax), "%v", syntax)
	require.False(t, pg.MissingTable(errors.New(`relation "x" does not exist`)))
	require.False(t, pg.MissingTable(nil))
	require.True(t, pg.MissingColumn(noColumn), "%v", noColumn)
	require.True(t, pg.MissingColumn(fmt.Errorf("wrapped: %w", noColumn)))
	require.False(t, pg.MissingColumn(missing), "%v", missing)
	require.False(t, pg.MissingColumn(syntax), "%v", syntax)
	require.False(t, pg.MissingColumn(nil))
}

// Lock takes turns between connections: a second holder waits at most
// its wait, then fails. The lock is its transaction's: the work done on
// the connection under it commits with unlock, and nothing of it (the
// lock, the lock_timeout) is left on the session after.
func TestPostgresLock(t *testing.T) {
	t.Parallel()
	db := pgOpen(t, 3)
	name := pgName("bq_test_pg_lock")
	table := pgTable(t, db, "bq_test_pg_lock", "id INT PRIMARY KEY")
	conn := func() bun.Conn {
		c, err := db.Conn(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	lockTimeout := func(c bun.Conn) string {
		var s string
		require.NoError(t, c.QueryRowContext(t.Context(), "SHOW lock_timeout").Scan(&s))
		return s
	}
	held := func() int {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = (?::bigint & 4294967295)::oid AND classid = ((?::bigint >> 32) & 4294967295)::oid",
			pg.LockKey(name), pg.LockKey(name)).Scan(&n))
		return n
	}
	a, b := conn(), conn()
	pgExec(t, b, "SET lock_timeout = '7s'")

	unlockA, err := pg.Lock(t.Context(), a, name, time.Second)
	require.NoError(t, err)
	pgExec(t, a, "INSERT INTO "+table+" (id) VALUES (1)")
	require.Zero(t, pgCount(t, db, "SELECT COUNT(*) FROM "+table), "the work under the lock is in its transaction")

	began := time.Now()
	_, err = pg.Lock(t.Context(), b, name, 200*time.Millisecond)
	require.ErrorContains(t, err, fmt.Sprintf("another process held the lock %q (advisory lock %d) for 200ms", name, pg.LockKey(name)))
	require.GreaterOrEqual(t, time.Since(began), 150*time.Millisecond)
	require.Less(t, time.Since(began), 3*time.Second)
	require.Equal(t, "7s", lockTimeout(b), "the session's lock_timeout is its own")

	_, err = pg.Lock(t.Context(), b, name, 0)
	require.ErrorContains(t, err, "another process held the lock", "without a wait: one try")
	unlockOther, err := pg.Lock(t.Context(), b, name+"_other", 0)
	require.NoError(t, err, "another name is another lock")
	require.NoError(t, unlockOther())

	// A waiter gets the lock once its holder lets go, and sees its work.
	got := make(chan error, 1)
	go func() {
		unlock, err := pg.Lock(t.Context(), b, name, 10*time.Second)
		if err == nil {
			var n int
			err = b.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n)
			if err == nil && n != 1 {
				err = fmt.Errorf("the waiter sees %d rows of its holder's work, want 1", n)
			}
			err = errors.Join(err, unlock())
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, unlockA())
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	require.Equal(t, "7s", lockTimeout(b))
	require.Equal(t, "0", lockTimeout(a))
	require.Zero(t, held(), "unlocked")
	require.Equal(t, 1, pgCount(t, db, "SELECT COUNT(*) FROM "+table), "the work under the lock committed")
	require.Equal(t, pg.LockKey(name), pg.LockKey(name))
	require.NotEqual(t, pg.LockKey(name), pg.LockKey(name+"x"))
}
