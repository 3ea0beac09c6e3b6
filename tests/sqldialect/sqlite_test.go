package sqldialect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

var sl = sqldialect.SQLite{}

// slFile returns the path of a fresh database file.
func slFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "test.db")
}

// slOpen opens the file at path with the given DSN parameters.
func slOpen(t *testing.T, path, params string) *bun.DB {
	t.Helper()
	return dbtest.OpenSQLiteDSN(t, "file:"+path+"?"+params, 0)
}

// slBusyError returns a real SQLITE_BUSY error: one connection holds the
// write lock while another, without a busy timeout, asks for it.
func slBusyError(t *testing.T) error {
	t.Helper()
	path := slFile(t)
	db := dbtest.OpenSQLiteFile(t, path, 0)
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	other := slOpen(t, path, "_pragma=journal_mode(WAL)")
	_, err = other.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.Error(t, err)
	return err
}

// codeError is an error with an SQLite result code, as modernc's
// *sqlite.Error has.
type codeError int

func (e codeError) Error() string { return fmt.Sprintf("sqlite error (%d)", int(e)) }
func (e codeError) Code() int     { return int(e) }

func TestSQLiteFor(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	d, err := sqldialect.For(db)
	require.NoError(t, err)
	require.Equal(t, sl, d)
	require.Empty(t, d.SkipLocked())
	require.Empty(t, d.ForUpdate())
	q, err := sqldialect.Locking(db.NewSelect().Table("t").Column("id").Limit(1), d.SkipLocked()).AppendQuery(db.QueryGen(), nil)
	require.NoError(t, err)
	require.Equal(t, `SELECT "id" FROM "t" LIMIT 1`, string(q), "no lock clause, not even a dangling FOR")
	s, err := migrate.For(db, tables.Default)
	require.NoError(t, err)
	require.Equal(t, migrate.SQLite(tables.Default), s)
}

func TestSQLiteCheckServerPasses(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	require.NoError(t, sl.CheckServer(t.Context(), db, tables.Default.Probe))
	require.GreaterOrEqual(t, db.Stats().OpenConnections, 2, "the probe uses two connections")
	// The probe restored the busy timeout of the connection it lowered.
	for range 4 {
		var ms int
		require.NoError(t, db.QueryRow("PRAGMA busy_timeout").Scan(&ms))
		require.Equal(t, 5000, ms)
	}
	require.NoError(t, sl.CheckServer(t.Context(), db, tables.Default.Probe), "again")

	// Several at once, from pools over one file, as processes that start
	// together.
	path := slFile(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		db := dbtest.OpenSQLiteFile(t, path, 0)
		wg.Go(func() { errs[i] = sl.CheckServer(t.Context(), db, tables.Default.Probe) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

func TestSQLiteCheckServerRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, params, want string
	}{
		{"deferred transactions", "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", "begins transactions DEFERRED"},
		{"no WAL", "_pragma=busy_timeout(5000)&_txlock=immediate", `journal mode "delete", not WAL`},
		{"no busy timeout", "_pragma=journal_mode(WAL)&_txlock=immediate", "no busy_timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := slOpen(t, slFile(t), tt.params)
			err := sl.CheckServer(t.Context(), db, tables.Default.Probe)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, sqldialect.SQLiteDSN, "the error gives the DSN to use")
		})
	}
	t.Run("in memory", func(t *testing.T) {
		t.Parallel()
		db := dbtest.OpenSQLiteDSN(t, "file::memory:?_pragma=busy_timeout(5000)&_txlock=immediate", 0)
		require.ErrorContains(t, sl.CheckServer(t.Context(), db, tables.Default.Probe), `journal mode "memory", not WAL`)
	})
}

func TestSQLiteCheckTable(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db, "CREATE TABLE items (id INTEGER PRIMARY KEY, status TEXT)", "CREATE VIEW items_view AS SELECT * FROM items")
	require.NoError(t, sl.CheckTable(t.Context(), db, "", "items"))
	require.NoError(t, sl.CheckTable(t.Context(), db, "", "ITEMS"), "names are case-insensitive")
	require.NoError(t, sl.CheckTable(t.Context(), db, "main", "items"))
	require.ErrorContains(t, sl.CheckTable(t.Context(), db, "", "items_view"), "items_view is a view, not a table")
	require.ErrorContains(t, sl.CheckTable(t.Context(), db, "", "nope"), "table nope does not exist")
}

func TestSQLitePrimaryKey(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db,
		"CREATE TABLE one (id INTEGER PRIMARY KEY, x TEXT)",
		"CREATE TABLE two (a TEXT NOT NULL, b INT NOT NULL, c TEXT, PRIMARY KEY (b, a))",
		"CREATE TABLE none (a TEXT)",
		"CREATE TABLE wr (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
	for table, want := range map[string][]string{"one": {"id"}, "two": {"b", "a"}, "none": nil, "wr": {"k"}} {
		cols, err := sl.PrimaryKey(t.Context(), db, "", table)
		require.NoError(t, err)
		require.Equal(t, want, cols, table)
	}
	cols, err := sl.PrimaryKey(t.Context(), db, "main", "two")
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a"}, cols)
}

func TestSQLiteErrors(t *testing.T) {
	t.Parallel()
	busy := slBusyError(t)
	require.True(t, sl.Retryable(busy), "%v", busy)
	require.True(t, sl.Retryable(fmt.Errorf("wrapped: %w", busy)))
	require.False(t, sl.ClientSide(busy))
	require.False(t, sl.MissingTable(busy))
	for code, want := range map[int]bool{5: true, 517: true, 261: true, 773: true, 6: true, 262: true, 1: false, 19: false, 2067: false, 13: false} {
		require.Equal(t, want, sl.Retryable(codeError(code)), "code %d", code)
	}
	require.False(t, sl.Retryable(errors.New("database is locked")), "a code, not a message")
	require.False(t, sl.Retryable(nil))

	db := dbtest.OpenSQLite(t, 0)
	_, missing := db.ExecContext(t.Context(), "SELECT * FROM nope")
	require.True(t, sl.MissingTable(missing), "%v", missing)
	require.False(t, sl.Retryable(missing))
	_, syntax := db.ExecContext(t.Context(), "SELEC 1")
	require.Error(t, syntax)
	require.False(t, sl.MissingTable(syntax))
	require.False(t, sl.MissingTable(errors.New("no such table: x")), "not an SQLite error")
	_, noColumn := db.ExecContext(t.Context(), "SELECT no_such_column FROM sqlite_master")
	require.True(t, sl.MissingColumn(noColumn), "%v", noColumn)
	require.False(t, sl.MissingColumn(missing), "%v", missing)
	require.False(t, sl.MissingColumn(syntax), "%v", syntax)
	require.False(t, sl.MissingColumn(errors.New("no such column: x")), "not an SQLite error")

	require.False(t, sl.ClientSide(nil))
	require.False(t, sl.ClientSide(syntax))
	require.False(t, sl.ClientSide(context.Canceled))
	require.False(t, sl.ClientSide(fmt.Errorf("x: %w", context.DeadlineExceeded)))
	require.False(t, sl.ClientSide(driver.ErrBadConn))
	require.False(t, sl.ClientSide(sql.ErrTxDone))
	require.True(t, sl.ClientSide(errors.New("sql: Scan error on column index 0: converting driver.Value type string to a int")))
}

// The hazard TxLost answers: a write cut short by its context rolls back
// the whole transaction, and the connection answers still.
func TestSQLiteTxLost(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INT)", "INSERT INTO t (id, v) VALUES (1, 0)")
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(t.Context(), "UPDATE t SET v = 1 WHERE id = 1")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = tx.ExecContext(ctx, "INSERT INTO t (v) SELECT 2 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) SELECT x FROM c) WHERE x < 0")
	require.Error(t, err, "interrupted")
	require.True(t, sl.TxLost(t.Context(), tx))
	_, err = tx.ExecContext(t.Context(), "SELECT 1")
	require.NoError(t, err, "the connection answers: nothing but TxLost's true tells the transaction is gone")
	require.Error(t, tx.Commit())
	var v int
	require.NoError(t, db.QueryRow("SELECT v FROM t WHERE id = 1").Scan(&v))
	require.Zero(t, v, "the update before the interrupted write was rolled back")
}

func TestSQLiteSessions(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	id, err := sl.SessionID(t.Context(), db)
	require.NoError(t, err)
	require.Zero(t, id)
	s, err := sl.TxSession(t.Context(), db)
	require.NoError(t, err)
	require.False(t, s.Known())
	require.NoError(t, sl.EndTxSession(t.Context(), db, s))
	require.NoError(t, sl.CheckEndTxSession(t.Context(), db))
	kept, err := sl.PreparedKept(t.Context(), db)
	require.NoError(t, err)
	require.True(t, kept)
	require.Nil(t, sl.TxOptions())
	require.Empty(t, sl.SessionSetup())
	require.Empty(t, sl.ForcePrimary())
	require.Empty(t, sl.ShareLock())
	n, err := sl.MaxStatement(t.Context(), db)
	require.NoError(t, err)
	require.Positive(t, n)
	require.Less(t, n, 1_000_000_000, "below SQLITE_MAX_SQL_LENGTH")
}

// A statement of MaxStatement bytes runs.
func TestSQLiteMaxStatementRuns(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	n, err := sl.MaxStatement(t.Context(), db)
	require.NoError(t, err)
	head := "SELECT length('"
	tail := "')"
	var got int
	require.NoError(t, db.QueryRow(head+strings.Repeat("x", n-len(head)-len(tail))+tail).Scan(&got))
	require.Equal(t, n-len(head)-len(tail), got)
}

func TestSQLiteClock(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db, "CREATE TABLE t (id INTEGER PRIMARY KEY, at DATETIME NULL)")
	var text string
	require.NoError(t, db.QueryRow("SELECT "+sl.Now()).Scan(&text))
	now, err := time.Parse("2006-01-02 15:04:05.999999-07:00", text)
	require.NoError(t, err, text)
	require.WithinDuration(t, time.Now(), now, 2*time.Second)

	before := time.Now().UTC().Add(-10 * time.Second).Truncate(time.Second) // no fraction: the shortest literal
	exact := time.Date(2024, 2, 3, 4, 5, 6, 120_000, time.UTC)              // ".00012"
	local := time.Date(2030, 1, 1, 12, 0, 0, 500_000_000, time.FixedZone("X", 5*3600))
	for id, v := range map[int]string{
		1: sl.Time(before), 2: sl.NowPlus(-1500 * time.Millisecond), 3: sl.Now(),
		4: sl.NowPlus(90 * time.Minute), 5: sl.Time(exact), 6: sl.Time(local), 7: sl.NowPlus(-365 * 24 * time.Hour),
	} {
		_, err := db.ExecContext(t.Context(), fmt.Sprintf("INSERT INTO t (id, at) VALUES (%d, %s)", id, v))
		require.NoError(t, err, v)
	}
	// Text order is time order.
	var ids []int
	require.NoError(t, db.NewRaw("SELECT id FROM t WHERE at <= "+sl.Now()+" ORDER BY at").Scan(t.Context(), &ids))
	require.Equal(t, []int{5, 7, 1, 2, 3}, ids)
	var at time.Time
	require.NoError(t, db.QueryRow("SELECT at FROM t WHERE id = 4").Scan(&at))
	require.WithinDuration(t, time.Now().Add(90*time.Minute), at, 2*time.Second)
	require.NoError(t, db.QueryRow("SELECT at FROM t WHERE id = 5").Scan(&at))
	require.True(t, exact.Equal(at), "Time keeps microseconds: %s", at)
	require.NoError(t, db.QueryRow("SELECT at FROM t WHERE id = 6").Scan(&at))
	require.True(t, local.Equal(at), "Time stores the instant, in UTC: %s", at)
	// bun writes time.Time as Time does.
	_, err = db.NewRaw("INSERT INTO t (id, at) VALUES (8, ?)", exact).Exec(t.Context())
	require.NoError(t, err)
	var same int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM t WHERE at = "+sl.Time(exact)).Scan(&same))
	require.Equal(t, 2, same)

	require.Equal(t, "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '+0.000001 seconds')", sl.NowPlus(time.Microsecond))
	require.Equal(t, "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '-2.500000 seconds')", sl.NowPlus(-2500*time.Millisecond))
	require.NotContains(t, sl.NowPlus(time.Hour)+sl.Now(), "?", "no placeholders")
}

func TestSQLiteInsertID(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db, "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT NULL UNIQUE, v TEXT NOT NULL)")
	insert := func(k, v string) string {
		return fmt.Sprintf("INSERT INTO t (k, v) VALUES (%s, %s)%s", k, v, sl.SkipTakenKeys())
	}
	id, ok, err := sl.InsertID(t.Context(), db, insert("'a'", "'x'"))
	require.NoError(t, err)
	require.True(t, ok)
	id2, ok, err := sl.InsertID(t.Context(), db, insert("'b'", "'x'"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, id+1, id2)
	_, ok, err = sl.InsertID(t.Context(), db, insert("'a'", "'y'"))
	require.NoError(t, err)
	require.False(t, ok, "a taken unique key skips the row")
	_, _, err = sl.InsertID(t.Context(), db, insert("'c'", "NULL"))
	require.ErrorContains(t, err, "NOT NULL", "other errors stay errors")
	r, err := db.ExecContext(t.Context(), insert("'a'", "'z'")+"")
	require.NoError(t, err)
	n, err := r.RowsAffected()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestSQLiteLock(t *testing.T) {
	t.Parallel()
	path := slFile(t)
	params := "_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)&_txlock=immediate"
	a, b := slOpen(t, path, params), slOpen(t, path, params)
	slExec(t, a, "CREATE TABLE t (id INTEGER PRIMARY KEY)")
	ca, err := a.Conn(t.Context())
	require.NoError(t, err)
	defer ca.Close()
	cb, err := b.Conn(t.Context())
	require.NoError(t, err)
	defer cb.Close()

	unlock, err := sl.Lock(t.Context(), ca, "m", time.Second)
	require.NoError(t, err)
	_, err = ca.ExecContext(t.Context(), "INSERT INTO t (id) VALUES (1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow("SELECT COUNT(*) FROM t").Scan(&n))
	require.Zero(t, n, "the statements under the lock are not committed yet")

	began := time.Now()
	_, err = sl.Lock(t.Context(), cb, "other name", 300*time.Millisecond)
	require.ErrorContains(t, err, "another connection held the database's write lock")
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "it waited")
	_, err = sl.Lock(t.Context(), cb, "m", 0)
	require.ErrorContains(t, err, `lock "m"`)

	got := make(chan error, 1)
	go func() {
		unlock2, err := sl.Lock(t.Context(), cb, "m", 5*time.Second)
		if err == nil {
			unlock2()
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	unlock()
	require.NoError(t, <-got, "taken once released")
	require.NoError(t, b.QueryRow("SELECT COUNT(*) FROM t").Scan(&n))
	require.Equal(t, 1, n, "unlock committed")

	ctx, cancel := context.WithCancel(t.Context())
	unlock, err = sl.Lock(t.Context(), ca, "m", time.Second)
	require.NoError(t, err)
	defer unlock()
	cancel()
	_, err = sl.Lock(ctx, cb, "m", time.Minute)
	require.Error(t, err, "a cancelled context stops the wait")
}

// Processes that migrate one database at once apply each version once.
func TestSQLiteMigrateConcurrently(t *testing.T) {
	t.Parallel()
	path := slFile(t)
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range errs {
		db := dbtest.OpenSQLiteFile(t, path, 0)
		wg.Go(func() { applied[i], errs[i] = migrate.Run(t.Context(), db, tables.Default) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	var total []int
	for _, a := range applied {
		total = append(total, a...)
	}
	var versions []int
	for _, m := range migrate.SQLite(tables.Default).Migrations {
		versions = append(versions, m.Version)
	}
	slices.Sort(total)
	require.Equal(t, versions, total)
	db := dbtest.OpenSQLiteFile(t, path, 0)
	for _, table := range []string{tables.Default.Jobs, tables.Default.FailedJobs} {
		require.NoError(t, sl.CheckTable(t.Context(), db, "", table))
	}
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+tables.Default.Migrations).Scan(&n))
	require.Equal(t, len(versions), n)
	again, err := migrate.Run(t.Context(), db, tables.Default)
	require.NoError(t, err)
	require.Empty(t, again)

	// The claim query reads the claim index, without a sort.
	p, err := sl.Explain(t.Context(), db, "SELECT id FROM bunqueue_jobs AS j WHERE queue = 'q' AND state = 0 AND run_at <= "+sl.Now()+" ORDER BY priority, run_at, id LIMIT 10")
	require.NoError(t, err)
	require.Empty(t, p.Problems(), "%s", p)
	require.Contains(t, p.String(), "bunqueue_jobs_claim")
}

func TestSQLiteExplain(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db,
		"CREATE TABLE x (id INTEGER PRIMARY KEY, status TEXT, note TEXT, other TEXT, retry_at DATETIME)",
		"CREATE INDEX x_status_id ON x (status, id)",
		"CREATE INDEX x_retry_at ON x (retry_at)")
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{`SELECT "t"."id" FROM "x" AS "t" WHERE (status = 'a') ORDER BY "t"."id" LIMIT 100`, nil},
		{`SELECT t.id FROM x AS t WHERE id IN (1, 2, 3)`, nil},
		{`SELECT t.id FROM x AS t WHERE (note = 'a') ORDER BY id LIMIT 100`, []string{"a full table scan of t"}},
		{`SELECT t.id FROM x AS t WHERE (note = 'a') ORDER BY other LIMIT 100`, []string{"a full table scan of t", "a sort"}},
		{`SELECT t.id FROM x AS t WHERE (note = 'a') ORDER BY retry_at LIMIT 100`, []string{"a full index scan of t (x_retry_at)"}},
		{`SELECT t.id FROM x AS t WHERE (status = 'a') ORDER BY note LIMIT 100`, []string{"a sort"}},
	} {
		p, err := sl.Explain(t.Context(), db, tt.query)
		require.NoError(t, err, tt.query)
		require.NotEmpty(t, p.Steps)
		require.Equal(t, tt.want, p.Problems(), "%s: %s", tt.query, p)
	}
	p, err := sl.Explain(t.Context(), db, `SELECT t.id FROM x AS t WHERE (status = 'a') ORDER BY note LIMIT 100`)
	require.NoError(t, err)
	require.Equal(t, "SEARCH t USING INDEX x_status_id (status=?) | USE TEMP B-TREE FOR ORDER BY", p.String())
	require.Equal(t, "t", p.Steps[0].Table)
	require.Equal(t, "SEARCH", p.Steps[0].Type)
	require.Equal(t, "x_status_id", p.Steps[0].Key)
	_, err = sl.Explain(t.Context(), db, "SELECT nope FROM x")
	require.Error(t, err)
}

func TestSQLiteSuggestIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenSQLite(t, 0)
	slExec(t, db,
		"CREATE TABLE x (id INTEGER PRIMARY KEY, status TEXT, kind TEXT, note TEXT, retry_at DATETIME)",
		"CREATE INDEX x_partial ON x (status, retry_at) WHERE note IS NULL",
		"CREATE INDEX x_expr ON x (lower(status), retry_at)",
		"CREATE TABLE y (a TEXT NOT NULL, b TEXT NOT NULL, status TEXT, PRIMARY KEY (a, b))",
		"CREATE INDEX y_status ON y (status)")
	query := `SELECT "t"."id" FROM "x" AS "t" WHERE ("status" = 'pending') AND (note = 'it''s \') -- a comment
		ORDER BY "t"."retry_at" LIMIT 100`
	idx, ok, err := sl.SuggestIndex(t.Context(), db, query, "", "x", "t", []string{"id"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `CREATE INDEX "x_status_note_retry_at_id" ON "x" ("status", "note", "retry_at", "id")`, idx.Create)
	require.Empty(t, idx.Existing, "neither a partial index nor one on an expression counts")

	// Created, it serves, and the plan has no problem left.
	slExec(t, db, idx.Create)
	again, ok, err := sl.SuggestIndex(t.Context(), db, query, "main", "x", "t", []string{"id"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "x_status_note_retry_at_id", again.Existing)
	require.Equal(t, `CREATE INDEX "x_status_note_retry_at_id" ON "main"."x" ("status", "note", "retry_at", "id")`, again.Create)
	p, err := sl.Explain(t.Context(), db, query)
	require.NoError(t, err)
	require.Empty(t, p.Problems(), "%s", p)

	// An index without the primary key serves: it carries the rowid,
	// which is the INTEGER PRIMARY KEY.
	q2 := `SELECT t.id FROM x AS t WHERE kind = 'k' ORDER BY id LIMIT 100`
	slExec(t, db, "CREATE INDEX x_kind ON x (kind)")
	idx, ok, err = sl.SuggestIndex(t.Context(), db, q2, "", "x", "t", []string{"id"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "x_kind", idx.Existing)

	// Not so where the primary key is not the rowid.
	q3 := `SELECT t.a, t.b FROM y AS t WHERE status = 's' ORDER BY a, b LIMIT 100`
	idx, ok, err = sl.SuggestIndex(t.Context(), db, q3, "", "y", "t", []string{"a", "b"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, idx.Existing)
	require.Equal(t, `CREATE INDEX "y_status_a_b" ON "y" ("status", "a", "b")`, idx.Create)

	// Too complex to read: no suggestion.
	_, ok, err = sl.SuggestIndex(t.Context(), db, `SELECT status FROM x GROUP BY status`, "", "x", "x", []string{"id"})
	require.NoError(t, err)
	require.False(t, ok)
}

// slExec runs SQLite statements as they are (dbtest.Exec may translate
// DDL written for MySQL).
func slExec(t *testing.T, db *bun.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.ExecContext(t.Context(), s)
		require.NoError(t, err, s)
	}
}
