package dbtest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// PgBouncerEnv names the environment variable with the DSN of a PgBouncer
// in transaction mode in front of the PostgreSQL of PGDSN, with a database
// alias test_session in session mode (scripts/pgbouncer.sh starts one).
const PgBouncerEnv = "BUNQUEUE_PGBOUNCER_DSN"

// DefaultPgBouncerDSN is used when BUNQUEUE_PGBOUNCER_DSN is not set.
const DefaultPgBouncerDSN = "postgres://postgres@127.0.0.1:6432/test?sslmode=disable"

// pgbouncerAnswers caches whether PgBouncer answered, once per process.
var pgbouncerAnswers = sync.OnceValue(func() error {
	db, err := sql.Open("pgx", withParams(pgbouncerBase(), map[string]string{"connect_timeout": "3", "default_query_exec_mode": "exec"}))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
})

func pgbouncerBase() string {
	if dsn := os.Getenv(PgBouncerEnv); dsn != "" {
		return dsn
	}
	return DefaultPgBouncerDSN
}

// PgBouncerDSN returns the DSN of database (the DSN's own when empty)
// through PgBouncer, in pgx's exec mode, in which pgx prepares no named
// statement of its own; with plain, in pgx's default mode, which does. It
// skips the test when PgBouncer does not answer and BUNQUEUE_PGBOUNCER_DSN
// is not set, and fails it when it is set.
func PgBouncerDSN(t testing.TB, database string, plain bool) string {
	t.Helper()
	if err := pgbouncerAnswers(); err != nil {
		if os.Getenv(PgBouncerEnv) != "" {
			t.Fatalf("PgBouncer at %s=%s does not answer: %v", PgBouncerEnv, pgbouncerBase(), err)
		}
		t.Skipf("PgBouncer does not answer at %s (%v): start it with scripts/pgbouncer.sh, or set %s", DefaultPgBouncerDSN, err, PgBouncerEnv)
	}
	params := map[string]string{}
	if !plain {
		params["default_query_exec_mode"] = "exec"
	}
	dsn := withParams(pgbouncerBase(), params)
	if database != "" {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.Path = "/" + database
		dsn = u.String()
	}
	return dsn
}

// withParams returns dsn, a URL, with params added to its query.
func withParams(dsn string, params map[string]string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenPGDSN opens a pool of at most maxConns connections (0: unlimited)
// on dsn, a PostgreSQL DSN (of PgBouncer, say), through pgx, whatever the
// server the tests run on; it is closed when the test ends.
func OpenPGDSN(t testing.TB, dsn string, maxConns int) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(max(maxConns, 4))
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping(), "the test needs PostgreSQL (or PgBouncer in front of it) at %s", dsn)
	return db
}

// ScratchPGDatabase creates a PostgreSQL database of the test's own, on
// the server of PGDSN, with the given settings as its defaults (ALTER
// DATABASE … SET, such as default_transaction_isolation), and returns its
// name. It is dropped, with whatever sessions are still in it, when the
// test ends.
func ScratchPGDatabase(t testing.TB, prefix string, settings map[string]string) string {
	t.Helper()
	admin := OpenPG(t, 1)
	name := Name(prefix)
	Exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	for k, v := range settings {
		_, err := admin.Exec("ALTER DATABASE "+name+" SET "+k+" = ?", v)
		require.NoError(t, err)
	}
	return name
}

// PGDatabaseDSN returns PGDSN with its database replaced by database.
func PGDatabaseDSN(t testing.TB, database string) string {
	t.Helper()
	u, err := url.Parse(PGDSN())
	require.NoError(t, err)
	u.Path = "/" + database
	return u.String()
}
