package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// pgArgsA and pgArgsB are two kinds of job for the PostgreSQL tests.
type pgArgsA struct {
	N int `json:"n"`
}

func (pgArgsA) Kind() string { return "pg_cli_a" }

type pgArgsB struct{}

func (pgArgsB) Kind() string { return "pg_cli_b" }

// pgDSN returns the tests' PostgreSQL DSN changed by edit.
func pgDSN(t *testing.T, edit func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(dbtest.PGDSN())
	require.NoError(t, err)
	edit(u)
	return u.String()
}

func TestIsPostgresDSN(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u@h/db":                  true,
		"postgresql://u@h:5432/db?sslmode=x": true,
		"POSTGRES://u@h/db":                  true,
		"root@tcp(127.0.0.1:3306)/test":      false,
		"postgres@tcp(127.0.0.1:3306)/test":  false,
		"":                                   false,
	} {
		require.Equal(t, want, isPostgresDSN(dsn), dsn)
	}
}

func TestConnectFailure(t *testing.T) {
	wrap := func(code string) error {
		return fmt.Errorf("failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	require.Equal(t, "the server refused the login to", connectFailure(wrap("28P01")), "bad password")
	require.Equal(t, "the server refused the login to", connectFailure(wrap("28000")), "unknown role, pg_hba rejection")
	require.Equal(t, "the server has no", connectFailure(wrap("3D000")))
	require.Equal(t, "cannot connect to", connectFailure(errors.New("dial tcp: connection refused")))
}

// TestPostgres runs the tool's commands against the local PostgreSQL
// server (BUNQUEUE_PG_DSN, default dbtest.DefaultPGDSN), in a database of
// its own.
func TestPostgres(t *testing.T) {
	admin := dbtest.OpenPG(t, 2)
	bin := buildBinary(t)
	ctx := t.Context()
	pgSQL := migrate.Postgres(tables.Default).SQL(sqldialect.Postgres{}, "PostgreSQL 12+")

	t.Run("migrate --sql prints the PostgreSQL schema without connecting", func(t *testing.T) {
		dead := pgDSN(t, func(u *url.URL) { u.Host = "127.0.0.1:1" })
		stdout, stderr, code := runWithEnv(t, nil, bin, "migrate", "--sql", "--dsn", dead)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, pgSQL, stdout)
		require.Contains(t, stdout, "TIMESTAMPTZ")
		require.NotContains(t, stdout, "ENGINE=InnoDB")

		stdout, stderr, code = runWithEnv(t, []string{"BUNQUEUE_MYSQL_DSN=" + dead}, bin, "migrate", "--sql")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, pgSQL, stdout, "the DSN of the environment picks the server too")

		stdout, stderr, code = runWithEnv(t, []string{"BUNQUEUE_MYSQL_DSN="}, bin, "migrate", "--sql")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, bunqueue.MigrationSQL(), stdout, "no DSN: MySQL's, as before")
	})

	t.Run("connection errors say what and where", func(t *testing.T) {
		_, stderr, code := runWithEnv(t, nil, bin, "stats", "--dsn", pgDSN(t, func(u *url.URL) { u.Host = "127.0.0.1:1" }))
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "cannot connect to")
		require.Contains(t, stderr, "127.0.0.1:1")
		require.Contains(t, stderr, "--dsn or BUNQUEUE_DSN")

		// This server may trust every login, so an unknown role stands for
		// a bad password: both are refused logins (28000, 28P01).
		role := dbtest.Name("nosuchrole")
		_, stderr, code = runWithEnv(t, nil, bin, "failed", "list", "--dsn",
			pgDSN(t, func(u *url.URL) { u.User = url.UserPassword(role, "wrong-secret") }))
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "refused the login")
		require.Contains(t, stderr, role)
		require.NotContains(t, stderr, "wrong-secret", "the password is not printed")

		missing := dbtest.Name("nosuchdb")
		_, stderr, code = runWithEnv(t, []string{"BUNQUEUE_MYSQL_DSN=" + pgDSN(t, func(u *url.URL) { u.Path = "/" + missing })},
			bin, "migrate")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "the server has no")
		require.Contains(t, stderr, missing)
		require.Contains(t, stderr, "from BUNQUEUE_MYSQL_DSN")

		_, stderr, code = runWithEnv(t, nil, bin, "stats", "--dsn", "postgres://u:secret@127.0.0.1:notaport/db")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "not valid")
		require.NotContains(t, stderr, "secret")
	})

	// A database of this test's own, for the rest.
	name := dbtest.Name("bqcli_pg")
	dbtest.Exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	dsn := pgDSN(t, func(u *url.URL) { u.Path = "/" + name })

	t.Run("missing tables, then migrate", func(t *testing.T) {
		for _, args := range [][]string{{"stats"}, {"failed", "list"}, {"failed", "show", "1"}, {"failed", "retry", "1"}} {
			_, stderr, code := runWithEnv(t, nil, bin, append(args, "--dsn", dsn)...)
			require.Equal(t, exitError, code, "%v: %s", args, stderr)
			require.Contains(t, stderr, "run `bunqueue migrate`", "%v", args)
			require.Contains(t, stderr, name, "%v", args)
		}

		stdout, stderr, code := runWithEnv(t, nil, bin, "migrate", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf("from schema version 0 to %d", migrate.Latest()))
		require.Contains(t, stdout, "PostgreSQL")
		stdout, stderr, code = runWithEnv(t, nil, bin, "migrate", "--dsn", dsn, "--json")
		require.Equal(t, exitOK, code, stderr)
		var rep migrateReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Equal(t, migrateReport{Database: rep.Database, Before: migrate.Latest(), Version: migrate.Latest()}, rep)
		require.Contains(t, rep.Database, name)

		stdout, stderr, code = runWithEnv(t, nil, bin, "stats", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "no jobs")
		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "list", "--dsn", dsn, "--json")
		require.Equal(t, exitOK, code, stderr)
		require.JSONEq(t, `{"failed_jobs": [], "next_before_id": null}`, stdout)
	})

	sqldb, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	sqldb.SetMaxOpenConns(4)
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, bunqueue.Migrate(ctx, db), "the tool migrated it already: a no-op")

	queue := dbtest.Name("pgcli")
	client, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	require.NoError(t, err)
	for i := range 3 {
		_, err := client.Enqueue(ctx, db, pgArgsA{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	_, err = client.Enqueue(ctx, db, pgArgsB{}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	require.NoError(t, err)
	now := time.Now().UTC()
	failed := []*bunqueue.FailedJob{
		{JobID: 1, Queue: queue, Kind: "pg_cli_a", Args: []byte(`{"n":"\u001b[31mred"}`), Attempts: 25, MaxAttempts: 25,
			Error: "boom \x1b[2J cleared\nsecond line", CreatedAt: now, FailedAt: now},
		{JobID: 2, Queue: queue, Kind: "pg_cli_b", Args: []byte(`{}`), Attempts: 1, MaxAttempts: 25,
			Error: "cancelled", CreatedAt: now, FailedAt: now},
	}
	for _, f := range failed {
		_, err := db.NewInsert().Model(f).Exec(ctx)
		require.NoError(t, err)
	}

	t.Run("stats", func(t *testing.T) {
		stdout, stderr, code := runWithEnv(t, nil, bin, "stats", "--dsn", dsn, "--json", "--queue", queue)
		require.Equal(t, exitOK, code, stderr)
		var rep statsReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Len(t, rep.Queues, 1, stdout)
		q := rep.Queues[0]
		require.Equal(t, queue, q.Queue)
		require.Equal(t, []int{3, 1, 2}, []int{q.Waiting, q.Scheduled, q.Failed}, stdout)
		require.False(t, q.Capped)
		require.NotNil(t, q.OldestWaitingSeconds)
		require.GreaterOrEqual(t, *q.OldestWaitingSeconds, 0.0)
		require.Less(t, *q.OldestWaitingSeconds, 600.0)
		require.Equal(t, []kindStats{
			{Kind: "pg_cli_a", Waiting: 3, Failed: 1},
			{Kind: "pg_cli_b", Scheduled: 1, Failed: 1},
		}, q.Kinds)

		// A job due for an hour: the age comes from the server's clock.
		_, err := db.ExecContext(ctx, "UPDATE bunqueue_jobs SET run_at = statement_timestamp() - interval '1 hour' "+
			"WHERE id = (SELECT MIN(id) FROM bunqueue_jobs WHERE queue = ? AND kind = 'pg_cli_a')", queue)
		require.NoError(t, err)
		stdout, stderr, code = runWithEnv(t, nil, bin, "stats", "--dsn", dsn, "--json", "--queue", queue)
		require.Equal(t, exitOK, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.NotNil(t, rep.Queues[0].OldestWaitingSeconds)
		require.InDelta(t, 3600, *rep.Queues[0].OldestWaitingSeconds, 60, stdout)

		stdout, stderr, code = runWithEnv(t, nil, bin, "stats", "--dsn", dsn, "--json", "--queue", queue, "--limit", "2")
		require.Equal(t, exitOK, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.True(t, rep.Queues[0].Capped, stdout)
		require.Equal(t, 2, rep.Queues[0].Waiting+rep.Queues[0].Scheduled, "counted at most --limit jobs")

		stdout, stderr, code = runWithEnv(t, []string{"BUNQUEUE_MYSQL_DSN=" + dsn}, bin, "stats")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "OLDEST WAITING")
		require.Contains(t, stdout, queue)
		require.Contains(t, stdout, "1h0")
	})

	t.Run("failed list pages", func(t *testing.T) {
		stdout, stderr, code := runWithEnv(t, nil, bin, "failed", "list", "--dsn", dsn, "--json", "--queue", queue, "--limit", "1")
		require.Equal(t, exitOK, code, stderr)
		var page failedList
		require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
		require.Len(t, page.FailedJobs, 1)
		require.Equal(t, failed[1].ID, page.FailedJobs[0].ID, "newest first")
		require.NotNil(t, page.NextBeforeID)
		require.JSONEq(t, `{}`, string(page.FailedJobs[0].Args))
		require.Equal(t, time.UTC, page.FailedJobs[0].FailedAt.Location(), "times in UTC")
		require.WithinDuration(t, now, page.FailedJobs[0].FailedAt, time.Millisecond)

		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "list", "--dsn", dsn, "--json", "--queue", queue,
			"--before", strconv.FormatInt(*page.NextBeforeID, 10))
		require.Equal(t, exitOK, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
		require.Len(t, page.FailedJobs, 1)
		require.Nil(t, page.NextBeforeID)
		f := page.FailedJobs[0]
		require.Equal(t, failed[0].ID, f.ID)
		require.Equal(t, failed[0].Error, f.Error, "JSON keeps the error as it is")
		require.JSONEq(t, string(failed[0].Args), string(f.Args))

		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "list", "--dsn", dsn, "--queue", queue, "--kind", "pg_cli_a")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, strconv.FormatInt(failed[0].ID, 10))
		require.NotContains(t, stdout, "\x1b", "control characters are escaped for the terminal")
		require.Contains(t, stdout, `boom \u001b[2J cleared …`)
		require.NotContains(t, stdout, "second line")
	})

	t.Run("failed show", func(t *testing.T) {
		id := strconv.FormatInt(failed[0].ID, 10)
		stdout, stderr, code := runWithEnv(t, nil, bin, "failed", "show", id, "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.NotContains(t, stdout, "\x1b")
		require.Contains(t, stdout, `{"n":"\u001b[31mred"}`, "the payload byte for byte (its JSON escape is printable)")
		require.Contains(t, stdout, "second line")
		require.Contains(t, stdout, "25 of 25")
		require.Contains(t, stdout, now.Format("2006-01-02 15:04:05"), "failed at, in UTC")

		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "show", "--json", id, "999999999999", "--dsn", dsn)
		require.Equal(t, exitNotFound, code, stderr)
		require.Contains(t, stderr, "no failed job with id 999999999999")
		var shown []failedJob
		require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
		require.Len(t, shown, 1)
		require.Equal(t, failed[0].ID, shown[0].ID)
	})

	t.Run("failed retry and delete", func(t *testing.T) {
		stdout, stderr, code := runWithEnv(t, nil, bin, "failed", "retry", "--dsn", dsn, "--json", strconv.FormatInt(failed[0].ID, 10))
		require.Equal(t, exitOK, code, stderr)
		var res []actionResult
		require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
		require.Len(t, res, 1)
		require.True(t, res[0].OK, stdout)
		require.Equal(t, queue, res[0].Queue)
		require.Positive(t, res[0].NewJobID)
		var back struct {
			Queue string
			Kind  string
			Args  []byte
		}
		require.NoError(t, db.NewRaw("SELECT queue, kind, args FROM bunqueue_jobs WHERE id = ?", res[0].NewJobID).Scan(ctx, &back))
		require.Equal(t, queue, back.Queue)
		require.Equal(t, "pg_cli_a", back.Kind)
		require.Equal(t, failed[0].Args, back.Args, "the payload is back byte for byte")

		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "retry", "--dsn", dsn, strconv.FormatInt(failed[0].ID, 10))
		require.Equal(t, exitNotFound, code, "retried already: %s", stdout)
		require.Contains(t, stderr, "no failed job with id")

		stdout, stderr, code = runWithEnv(t, nil, bin, "failed", "delete", "--dsn", dsn, strconv.FormatInt(failed[1].ID, 10))
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "deleted failed job")
		_, _, code = runWithEnv(t, nil, bin, "failed", "delete", "--dsn", dsn, strconv.FormatInt(failed[1].ID, 10))
		require.Equal(t, exitNotFound, code)

		var left int
		require.NoError(t, db.NewRaw("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue).Scan(ctx, &left))
		require.Zero(t, left)

		stdout, stderr, code = runWithEnv(t, nil, bin, "stats", "--dsn", dsn, "--queue", queue, "--json")
		require.Equal(t, exitOK, code, stderr)
		var rep statsReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Equal(t, []int{4, 1, 0}, []int{rep.Queues[0].Waiting, rep.Queues[0].Scheduled, rep.Queues[0].Failed},
			"the retried job waits again")
		require.True(t, strings.Contains(stdout, queue), stdout)
	})

	t.Run("job get, list, run-now, cancel and delete", func(t *testing.T) { testJobCommands(t, bin, dbtest.PGDSN()) })
}
