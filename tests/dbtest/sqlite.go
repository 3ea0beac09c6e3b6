package dbtest

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SQLiteDSN returns the DSN of the SQLite database file at path, as
// bunqueue needs it: WAL, a busy timeout, transactions that take the
// write lock when they begin.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// OpenSQLite is Open for a fresh SQLite database file in t.TempDir(),
// through modernc.org/sqlite.
func OpenSQLite(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	return OpenSQLiteFile(t, filepath.Join(t.TempDir(), "bunqueue.db"), maxConns)
}

// OpenSQLiteFile is Open for the SQLite database file at path, created if
// missing.
func OpenSQLiteFile(t testing.TB, path string, maxConns int) *bun.DB {
	t.Helper()
	return OpenSQLiteDSN(t, SQLiteDSN(path), maxConns)
}

// OpenSQLiteDSN is Open for SQLite with any DSN of modernc.org/sqlite.
func OpenSQLiteDSN(t testing.TB, dsn string, maxConns int) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	db := bun.NewDB(sqldb, sqlitedialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping(), "open SQLite database %s", dsn)
	return db
}

// sqliteFiles are the database files of the running tests, by top-level
// test: every pool a test (and its subtests) opens through
// OpenSQLiteShared reads the same file, as two clients of one MySQL or
// PostgreSQL server share its database.
var sqliteFiles = struct {
	sync.Mutex
	byTest map[string]*sqliteFile
}{byTest: map[string]*sqliteFile{}}

type sqliteFile struct {
	dir  string
	open int // the tests that use it and have not ended
}

// OpenSQLiteShared is OpenSQLite, but over one database file per
// top-level test: every call from the test or its subtests opens a pool
// over the same file. The file is removed when the last test that opened
// it ends.
func OpenSQLiteShared(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	sqliteFiles.Lock()
	f := sqliteFiles.byTest[top]
	if f == nil {
		dir, err := os.MkdirTemp("", "bunqueue-sqlite-")
		if err != nil {
			sqliteFiles.Unlock()
			require.NoError(t, err)
		}
		f = &sqliteFile{dir: dir}
		sqliteFiles.byTest[top] = f
	}
	f.open++
	sqliteFiles.Unlock()
	// Registered before the pool's Close, so it runs after it.
	t.Cleanup(func() {
		sqliteFiles.Lock()
		defer sqliteFiles.Unlock()
		if f.open--; f.open == 0 {
			delete(sqliteFiles.byTest, top)
			_ = os.RemoveAll(f.dir)
		}
	})
	return OpenSQLiteFile(t, filepath.Join(f.dir, "bunqueue.db"), maxConns)
}

// sqliteSleep is the SQL of a statement that runs for at least seconds:
// SQLite has no sleep, and reads the clock once per statement, so it
// counts. The driver interrupts it when its context ends.
func sqliteSleep(seconds int) string {
	return fmt.Sprintf("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d) SELECT COUNT(*) FROM c", seconds*50_000_000)
}
