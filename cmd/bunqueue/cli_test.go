package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/histsql"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// cliArgsA and cliArgsB are two kinds of job for the CLI tests.
type cliArgsA struct {
	N int `json:"n"`
}

func (cliArgsA) Kind() string { return "cli_test_a" }

type cliArgsB struct{}

func (cliArgsB) Kind() string { return "cli_test_b" }

// runWithEnv runs bin with args and extra environment variables; the
// DSN variables of the tests' own environment are cleared first.
func runWithEnv(t *testing.T, env []string, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for _, name := range dsnVariables() {
		cmd.Env = append(cmd.Env, name+"=")
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errOut.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// dsnFor returns the tests' DSN pointed at another database.
func dsnFor(t *testing.T, database string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dbtest.DSN())
	require.NoError(t, err)
	cfg.DBName = database
	return cfg.FormatDSN()
}

func TestCLI(t *testing.T) {
	dbtest.OnlyMySQL(t, "the command-line tool and dashboard are MySQL-only for now")
	bin := buildBinary(t)
	db := dbtest.Open(t, 4)
	ctx := t.Context()

	t.Run("help lists the commands and exit codes", func(t *testing.T) {
		stdout, _, code := runBinary(t, bin, "help")
		require.Equal(t, exitOK, code)
		for _, c := range []string{"migrate", "stats", "failed", "Exit codes", "BUNQUEUE_DSN"} {
			require.Contains(t, stdout, c)
		}
		stdout, _, code = runBinary(t, bin, "failed", "--help")
		require.Equal(t, exitOK, code)
		require.Contains(t, stdout, "retry")
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"failed"}, {"failed", "frob"}, {"failed", "retry"}, {"failed", "retry", "abc"},
			{"failed", "show", "-3"}, {"failed", "list", "--limit", "0"}, {"stats", "--limit", "0"},
			{"stats", "extra"}, {"migrate", "--nosuchflag"},
		} {
			_, stderr, code := runBinary(t, bin, args...)
			require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
			require.NotEmpty(t, stderr, "%v", args)
		}
	})

	t.Run("cannot connect: says where and how to change it", func(t *testing.T) {
		_, stderr, code := runBinary(t, bin, "stats", "--dsn", "root@tcp(127.0.0.1:1)/test")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "cannot connect")
		require.Contains(t, stderr, "127.0.0.1:1")
		require.Contains(t, stderr, "--dsn or BUNQUEUE_DSN")

		_, stderr, code = runWithEnv(t, []string{"BUNQUEUE_MYSQL_DSN=root@tcp(127.0.0.1:1)/test"}, bin, "failed", "list")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "127.0.0.1:1")
		require.Contains(t, stderr, "from BUNQUEUE_MYSQL_DSN")

		_, stderr, code = runBinary(t, bin, "migrate", "--dsn", "not a dsn")
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "not valid")
	})

	t.Run("missing tables, then migrate", func(t *testing.T) {
		name := dbtest.Name("bqcli")
		dbtest.Exec(t, db, "CREATE DATABASE "+name)
		t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS " + name) })
		dsn := dsnFor(t, name)

		for _, args := range [][]string{{"stats"}, {"failed", "list"}, {"failed", "show", "1"}} {
			_, stderr, code := runBinary(t, bin, append(args, "--dsn", dsn)...)
			require.Equal(t, exitError, code, "%v", args)
			require.Contains(t, stderr, "run `bunqueue migrate`", "%v", args)
			require.Contains(t, stderr, name, "%v", args)
		}

		stdout, stderr, code := runBinary(t, bin, "migrate", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf("from schema version 0 to %d", migrate.Latest()))
		stdout, stderr, code = runBinary(t, bin, "migrate", "--dsn", dsn, "--json")
		require.Equal(t, exitOK, code, stderr)
		var rep migrateReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Equal(t, migrateReport{Database: rep.Database, Before: migrate.Latest(), Version: migrate.Latest()}, rep)

		stdout, stderr, code = runBinary(t, bin, "stats", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "no jobs")
		stdout, stderr, code = runBinary(t, bin, "failed", "list", "--dsn", dsn, "--json")
		require.Equal(t, exitOK, code, stderr)
		require.JSONEq(t, `{"failed_jobs": [], "next_before_id": null}`, stdout)
	})

	t.Run("migrate --sql connects to nothing", func(t *testing.T) {
		stdout, _, code := runBinary(t, bin, "migrate", "--sql", "--dsn", "root@tcp(127.0.0.1:1)/test")
		require.Equal(t, exitOK, code)
		require.Equal(t, bunqueue.MigrationSQL(), stdout)
	})

	// The shared test database, with this test's own queue.
	require.NoError(t, bunqueue.Migrate(ctx, db))
	queue := dbtest.Name("cli")
	t.Cleanup(func() {
		_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
	client, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	require.NoError(t, err)
	for i := range 3 {
		_, err := client.Enqueue(ctx, db, cliArgsA{N: i}, &bunqueue.EnqueueOpts{Queue: queue})
		require.NoError(t, err)
	}
	_, err = client.Enqueue(ctx, db, cliArgsB{}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	require.NoError(t, err)
	// Failed jobs, one of each kind, with what a terminal must not
	// interpret.
	now := time.Now().UTC()
	failed := []*bunqueue.FailedJob{
		{JobID: 1, Queue: queue, Kind: "cli_test_a", Args: []byte(`{"n":"\u001b[31mred"}`), Attempts: 25, MaxAttempts: 25,
			Error: "boom \x1b[2J cleared\nsecond line", CreatedAt: now, FailedAt: now},
		{JobID: 2, Queue: queue, Kind: "cli_test_b", Args: []byte(`{}`), Attempts: 1, MaxAttempts: 25,
			Error: "cancelled", CreatedAt: now, FailedAt: now},
	}
	for _, f := range failed {
		_, err := db.NewInsert().Model(f).Exec(ctx)
		require.NoError(t, err)
	}
	// The fleet's history: what processes added this minute.
	t.Cleanup(func() { _, _ = db.Exec("DELETE FROM bunqueue_history WHERE queue = ?", queue) })
	dialect, err := sqldialect.For(db)
	require.NoError(t, err)
	require.NoError(t, histsql.New(dialect, tables.Default).Add(ctx, db, map[string]*histsql.Counts{queue: {Processed: 5, Failed: 2}}))
	dsn := dbtest.DSN()

	t.Run("stats", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "stats", "--dsn", dsn, "--json", "--queue", queue)
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
			{Kind: "cli_test_a", Waiting: 3, Failed: 1},
			{Kind: "cli_test_b", Scheduled: 1, Failed: 1},
		}, q.Kinds)
		require.Equal(t, []fleetQueue{{Queue: queue, Processed: 5, Failed: 2}}, rep.FleetLastHour, "the fleet's last hour")

		stdout, stderr, code = runBinary(t, bin, "stats", "--dsn", dsn, "--json", "--queue", queue, "--limit", "2")
		require.Equal(t, exitOK, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.True(t, rep.Queues[0].Capped, stdout)
		require.Equal(t, 2, rep.Queues[0].Waiting+rep.Queues[0].Scheduled, "counted at most --limit jobs")

		stdout, stderr, code = runBinary(t, bin, "stats", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "OLDEST WAITING")
		require.Contains(t, stdout, "PROCESSED (LAST HOUR, FLEET)")
		require.Contains(t, stdout, queue)
	})

	var ids []int64
	t.Run("failed list pages", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "failed", "list", "--dsn", dsn, "--json", "--queue", queue, "--limit", "1")
		require.Equal(t, exitOK, code, stderr)
		var page failedList
		require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
		require.Len(t, page.FailedJobs, 1)
		require.Equal(t, failed[1].ID, page.FailedJobs[0].ID, "newest first")
		require.NotNil(t, page.NextBeforeID)
		require.JSONEq(t, `{}`, string(page.FailedJobs[0].Args))

		stdout, stderr, code = runBinary(t, bin, "failed", "list", "--dsn", dsn, "--json", "--queue", queue,
			"--before", strconv.FormatInt(*page.NextBeforeID, 10))
		require.Equal(t, exitOK, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
		require.Len(t, page.FailedJobs, 1)
		require.Nil(t, page.NextBeforeID)
		f := page.FailedJobs[0]
		require.Equal(t, failed[0].ID, f.ID)
		require.Equal(t, failed[0].Error, f.Error, "JSON keeps the error as it is")
		require.JSONEq(t, string(failed[0].Args), string(f.Args))

		stdout, stderr, code = runBinary(t, bin, "failed", "list", "--dsn", dsn, "--queue", queue, "--kind", "cli_test_a")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, strconv.FormatInt(failed[0].ID, 10))
		require.NotContains(t, stdout, "\x1b", "control characters are escaped for the terminal")
		require.Contains(t, stdout, `boom \u001b[2J cleared …`)
		require.NotContains(t, stdout, "second line")
		ids = []int64{failed[0].ID, failed[1].ID}
	})

	t.Run("failed show", func(t *testing.T) {
		id := strconv.FormatInt(failed[0].ID, 10)
		stdout, stderr, code := runBinary(t, bin, "failed", "show", id, "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		require.NotContains(t, stdout, "\x1b")
		require.Contains(t, stdout, `{"n":"\u001b[31mred"}`, "the payload byte for byte (its JSON escape is printable)")
		require.Contains(t, stdout, "second line")
		require.Contains(t, stdout, "25 of 25")

		stdout, stderr, code = runBinary(t, bin, "failed", "show", "--json", id, "999999999999", "--dsn", dsn)
		require.Equal(t, exitNotFound, code, stderr)
		require.Contains(t, stderr, "no failed job with id 999999999999")
		var shown []failedJob
		require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
		require.Len(t, shown, 1)
		require.Equal(t, failed[0].ID, shown[0].ID)
	})

	t.Run("failed retry and delete", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, bin, "failed", "retry", "--dsn", dsn, "--json", strconv.FormatInt(ids[0], 10))
		require.Equal(t, exitOK, code, stderr)
		var res []actionResult
		require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
		require.Len(t, res, 1)
		require.True(t, res[0].OK)
		require.Equal(t, queue, res[0].Queue)
		require.Positive(t, res[0].NewJobID)
		var back struct {
			Queue string
			Kind  string
			Args  []byte
		}
		require.NoError(t, db.NewRaw("SELECT queue, kind, args FROM bunqueue_jobs WHERE id = ?", res[0].NewJobID).Scan(ctx, &back))
		require.Equal(t, queue, back.Queue)
		require.Equal(t, "cli_test_a", back.Kind)
		require.Equal(t, failed[0].Args, back.Args, "the payload is back byte for byte")

		stdout, stderr, code = runBinary(t, bin, "failed", "retry", "--dsn", dsn, strconv.FormatInt(ids[0], 10))
		require.Equal(t, exitNotFound, code, "retried already: %s", stdout)
		require.Contains(t, stderr, "no failed job with id")

		stdout, stderr, code = runBinary(t, bin, "failed", "delete", "--dsn", dsn, strconv.FormatInt(ids[1], 10))
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "deleted failed job")
		_, _, code = runBinary(t, bin, "failed", "delete", "--dsn", dsn, strconv.FormatInt(ids[1], 10))
		require.Equal(t, exitNotFound, code)

		var left int
		require.NoError(t, db.NewRaw("SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue).Scan(context.Background(), &left))
		require.Zero(t, left)
		stdout, _, _ = runBinary(t, bin, "stats", "--dsn", dsn, "--queue", queue)
		require.True(t, strings.Contains(stdout, queue), stdout)
	})

	t.Run("queue pause, list and resume", func(t *testing.T) {
		dsn := dbtest.DSN()
		queue := dbtest.Name("cli_pause")
		t.Cleanup(func() {
			_, _ = db.NewRaw("DELETE FROM bunqueue_queues WHERE name = ?", queue).Exec(context.Background())
		})
		_, stderr, code := runBinary(t, bin, "migrate", "--dsn", dsn)
		require.Equal(t, exitOK, code, stderr)
		stdout, stderr, code := runBinary(t, bin, "queue", "pause", "--dsn", dsn, queue)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "queue "+queue+" paused\n", stdout)
		stdout, stderr, code = runBinary(t, bin, "queue", "list", "--dsn", dsn, "--json")
		require.Equal(t, exitOK, code, stderr)
		var list map[string][]queueResult
		require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
		require.Contains(t, list["paused"], queueResult{Queue: queue, Paused: true})
		stdout, stderr, code = runBinary(t, bin, "queue", "resume", "--dsn", dsn, "--json", queue)
		require.Equal(t, exitOK, code, stderr)
		require.JSONEq(t, `{"queue": "`+queue+`", "paused": false}`, stdout)
		stdout, _, _ = runBinary(t, bin, "queue", "list", "--dsn", dsn)
		require.NotContains(t, stdout, queue)

		_, stderr, code = runBinary(t, bin, "queue", "pause", "--dsn", dsn)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "give one queue name")
		_, stderr, code = runBinary(t, bin, "queue", "pause", "--dsn", dsn, strings.Repeat("q", 129))
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "the queue name must have 1 to 128 bytes")
		_, stderr, code = runBinary(t, bin, "queue", "stop", "--dsn", dsn, queue)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, `unknown subcommand "stop"`)
	})

	t.Run("job get, list, run-now, cancel and delete", func(t *testing.T) { testJobCommands(t, bin, dbtest.DSN()) })
}

// testJobCommands runs the job commands on a queue of their own on the
// database of dsn.
func testJobCommands(t *testing.T, bin, dsn string) {
	ctx := t.Context()
	d, err := connect(ctx, testDBFlags(dsn))
	require.NoError(t, err)
	t.Cleanup(d.close)
	require.NoError(t, bunqueue.Migrate(ctx, d.db))
	queue := dbtest.Name("cli_job")
	t.Cleanup(func() {
		_, _ = d.db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
		_, _ = d.db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
	})
	client, err := bunqueue.NewClient(d.db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		res, err := client.Enqueue(ctx, d.db, cliArgsA{N: i}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
		require.NoError(t, err)
		ids = append(ids, strconv.FormatInt(res.ID, 10))
	}

	stdout, stderr, code := runBinary(t, bin, "job", "list", "--dsn", dsn, "--json", "--queue", queue, "--limit", "2")
	require.Equal(t, exitOK, code, stderr)
	var page jobList
	require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, ids[2], strconv.FormatInt(page.Jobs[0].ID, 10), "newest first")
	require.Equal(t, bunqueue.JobStateScheduled, page.Jobs[0].State)
	require.NotNil(t, page.NextCursor)
	stdout, stderr, code = runBinary(t, bin, "job", "list", "--dsn", dsn, "--json", "--queue", queue, "--cursor", *page.NextCursor)
	require.Equal(t, exitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
	require.Len(t, page.Jobs, 1)
	require.Nil(t, page.NextCursor)
	require.JSONEq(t, `{"n":0}`, string(page.Jobs[0].Args))

	stdout, stderr, code = runBinary(t, bin, "job", "list", "--dsn", dsn, "--json", "--queue", queue, "--search", `"N":1}`)
	require.Equal(t, exitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
	require.Len(t, page.Jobs, 1, "the job whose args hold the text, either case")
	require.Equal(t, ids[1], strconv.FormatInt(page.Jobs[0].ID, 10))
	require.Equal(t, 3, page.Searched)

	stdout, stderr, code = runBinary(t, bin, "job", "run-now", "--dsn", dsn, ids[0])
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "job "+ids[0]+" is due now\n", stdout)
	stdout, stderr, code = runBinary(t, bin, "job", "cancel", "--dsn", dsn, ids[1], "999999999999")
	require.Equal(t, exitNotFound, code, stderr)
	require.Equal(t, "cancelled job "+ids[1]+" (it was scheduled)\n", stdout)
	require.Contains(t, stderr, "no job with id 999999999999")
	stdout, stderr, code = runBinary(t, bin, "job", "get", "--dsn", dsn, ids[1])
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "state:      failed")
	require.Contains(t, stdout, "cancelled with JobCancel")
	stdout, stderr, code = runBinary(t, bin, "job", "list", "--dsn", dsn, "--queue", queue, "--state", "pending,failed")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "pending")
	require.Contains(t, stdout, "failed")
	require.NotContains(t, stdout, "scheduled")

	stdout, stderr, code = runBinary(t, bin, "job", "delete", "--dsn", dsn, "--json", ids[1], ids[2])
	require.Equal(t, exitOK, code, stderr)
	var res []jobActionResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
	require.Len(t, res, 2)
	require.True(t, res[0].OK && res[1].OK, stdout)
	// The JSON as an argument, not a literal: PostgreSQL's literals keep a
	// backslash as it is, MySQL's read it as an escape.
	_, err = d.db.Exec(`UPDATE bunqueue_jobs SET attempts = 2, attempt_errors = ? WHERE id = ?`,
		`[{"attempt":1,"at_us":1796279400123456,"error":"boom\nstack"},{"attempt":2,"at_us":1796279401000000,"error":"bang"}]`, ids[0])
	require.NoError(t, err)
	stdout, stderr, code = runBinary(t, bin, "job", "get", "--dsn", dsn, "--json", ids[0], ids[2])
	require.Equal(t, exitNotFound, code, stderr)
	var shown []jobRecord
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	require.Len(t, shown, 1)
	require.Equal(t, bunqueue.JobStateRetrying, shown[0].State)
	require.Equal(t, []attemptRecord{{1, time.UnixMicro(1796279400123456).UTC(), "boom\nstack"}, {2, time.UnixMicro(1796279401000000).UTC(), "bang"}}, shown[0].Errors)
	stdout, stderr, code = runBinary(t, bin, "job", "get", "--dsn", dsn, ids[0])
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "failed attempts (2, oldest first):\n  1  2026-12-03 06:30:00.123456 UTC  boom …\n  2  2026-12-03 06:30:01.000000 UTC  bang\n")

	for _, args := range [][]string{{"job"}, {"job", "frob"}, {"job", "cancel"}, {"job", "get", "x"},
		{"job", "list", "--limit", "0"}, {"job", "list", "--state", "done"}, {"job", "list", "--from", "yesterday"}, {"job", "list", "--search", "\xff"}} {
		_, stderr, code := runBinary(t, bin, append(args, "--dsn", dsn)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.NotEmpty(t, stderr, "%v", args)
	}
}

// testDBFlags are the flags of a command given dsn, and bunqueue's default
// tables.
func testDBFlags(dsn string) dbFlags {
	empty := ""
	return dbFlags{dsn: &dsn, prefix: &empty, schema: &empty}
}
