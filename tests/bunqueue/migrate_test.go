package bunqueue_test

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/tables"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// scratchDatabase creates an empty database of the test's own, dropped
// when the test ends, and returns a DSN that points to it.
func scratchDatabase(t *testing.T, prefix string) string {
	t.Helper()
	return dbtest.Scratch(t, prefix)
}

var autoIncrement = regexp.MustCompile(` AUTO_INCREMENT=\d+`)

// schemaOf returns the CREATE TABLE statements of the jobs tables, without
// their AUTO_INCREMENT counters (on PostgreSQL, which has no SHOW CREATE
// TABLE, their columns and the definitions of their indexes).
func schemaOf(t *testing.T, db *bun.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{tables.Default.Jobs, tables.Default.FailedJobs, tables.Default.Migrations} {
		if isPG(db) {
			var cols, idxs []string
			require.NoError(t, db.NewRaw(`SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '') || ' ' || is_identity
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`, table).Scan(t.Context(), &cols))
			require.NoError(t, db.NewRaw(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ? ORDER BY indexname`, table).Scan(t.Context(), &idxs))
			require.NotEmpty(t, cols, "table %s", table)
			out[table] = strings.Join(append(cols, idxs...), "\n")
			continue
		}
		var name, ddl string
		require.NoError(t, db.QueryRowContext(t.Context(), "SHOW CREATE TABLE "+table).Scan(&name, &ddl))
		out[table] = autoIncrement.ReplaceAllString(ddl, "")
	}
	return out
}

type versionRow struct {
	Version int
	Name    string
}

func appliedVersions(t *testing.T, db *bun.DB) []versionRow {
	t.Helper()
	var out []versionRow
	require.NoError(t, db.NewRaw("SELECT version, name FROM bunqueue_migrations ORDER BY version").Scan(t.Context(), &out))
	return out
}

func allVersions(t *testing.T, db *bun.DB) []versionRow {
	t.Helper()
	s, err := migrate.For(db, tables.Default)
	require.NoError(t, err)
	var out []versionRow
	for _, m := range s.Migrations {
		out = append(out, versionRow{m.Version, m.Name})
	}
	return out
}

// Migrate is idempotent: a second run applies nothing, changes no table
// and keeps the rows.
func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	shared := migrated(t, 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), shared), "the shared database, migrated already")

	db := openDSN(t, scratchDatabase(t, "bq_test_migidem"), 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	require.Equal(t, allVersions(t, db), appliedVersions(t, db))
	first := schemaOf(t, db)
	if isPG(db) {
		require.Contains(t, first[tables.Default.Jobs], "INDEX bunqueue_jobs_claim ON")
		require.Contains(t, first[tables.Default.Jobs], "(queue, state, priority, run_at, id)")
		require.Contains(t, first[tables.Default.Jobs], "UNIQUE INDEX bunqueue_jobs_unique_key ON")
	} else {
		require.Contains(t, first[tables.Default.Jobs], "KEY `bunqueue_jobs_claim` (`queue`,`state`,`priority`,`run_at`,`id`)")
		require.Contains(t, first[tables.Default.Jobs], "UNIQUE KEY `bunqueue_jobs_unique_key` (`unique_key`)")
		require.Contains(t, first[tables.Default.Jobs], "ENGINE=InnoDB")
	}
	dbtest.Exec(t, db, "INSERT INTO bunqueue_jobs (queue, kind, args, max_attempts, run_at, created_at) VALUES ('q', 'k', '{}', 1, "+nowSQL(db)+", "+nowSQL(db)+")")

	applied, err := migrate.Run(t.Context(), db, tables.Default)
	require.NoError(t, err)
	require.Empty(t, applied, "a second run applies nothing")
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	require.Equal(t, first, schemaOf(t, db))
	require.Equal(t, allVersions(t, db), appliedVersions(t, db))
	require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs"), "the rows are kept")
}

// Eight processes (pools of their own) migrating an empty database at once
// all succeed, and each version is applied once.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	const procs = 8
	for _, via := range []string{"Migrate", "migrate.Run"} {
		t.Run(via, func(t *testing.T) {
			dsn := scratchDatabase(t, "bq_test_migconc")
			pools := make([]*bun.DB, procs)
			for i := range pools {
				pools[i] = openDSN(t, dsn, 2)
			}
			errs := make([]error, procs)
			applied := make([][]int, procs)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for i, db := range pools {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if via == "Migrate" {
						errs[i] = bunqueue.Migrate(ctx, db)
					} else {
						applied[i], errs[i] = migrate.Run(ctx, db, tables.Default)
					}
				}()
			}
			close(gate)
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "process %d", i)
			}
			require.Equal(t, allVersions(t, pools[0]), appliedVersions(t, pools[0]), "one row per version")
			if via == "migrate.Run" {
				times := map[int]int{}
				for _, vs := range applied {
					for _, v := range vs {
						times[v]++
					}
				}
				want := map[int]int{}
				s, err := migrate.For(pools[0], tables.Default)
				require.NoError(t, err)
				for _, m := range s.Migrations {
					want[m.Version] = 1
				}
				require.Equal(t, want, times, "each version applied by exactly one process")
			}
			schemaOf(t, pools[0]) // the tables exist
		})
	}
}

// sqlStatements splits a script like MigrationSQL's into statements,
// without their comment lines.
func sqlStatements(script string) []string {
	var out []string
	for _, part := range strings.Split(script, ";\n") {
		var lines []string
		for _, l := range strings.Split(part, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		if s := strings.TrimSpace(strings.Join(lines, "\n")); s != "" {
			out = append(out, s)
		}
	}
	return out
}

type migrationSQLArgs struct{}

func (migrationSQLArgs) Kind() string { return "t_migration_sql" }

// MigrationSQL holds the CREATE TABLE statements; run statement by
// statement in an empty database (twice: it is harmless), it makes the
// same tables as Migrate and records the versions, so that Migrate has
// nothing left to do and the jobs tables work.
func TestMigrationSQL(t *testing.T) {
	t.Parallel()
	dbtest.OnlyMySQL(t, "bunqueue.MigrationSQL is the MySQL and MariaDB script")
	script := bunqueue.MigrationSQL()
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS bunqueue_migrations (",
		"CREATE TABLE IF NOT EXISTS bunqueue_jobs (",
		"CREATE TABLE IF NOT EXISTS bunqueue_failed_jobs (",
		"KEY bunqueue_jobs_claim (queue, state, priority, run_at, id)",
		"INSERT INTO bunqueue_migrations (version, name, applied_at) VALUES (2, 'queue, kind and unique_key compare exactly', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version;",
		"MODIFY unique_key VARBINARY(255) NULL",
	} {
		require.Contains(t, script, want)
	}
	require.NotContains(t, script, "IGNORE", "no statement that turns errors into warnings")
	require.True(t, strings.HasSuffix(script, ";\n"))
	stmts := sqlStatements(script)
	require.Len(t, stmts, 1+len(migrate.MySQL(tables.Default).Migrations)+countStatements(), "the versions table, each migration's statements and its INSERT")

	bySQL := openDSN(t, scratchDatabase(t, "bq_test_migsql"), 0)
	for range 2 {
		for _, s := range stmts {
			_, err := bySQL.ExecContext(t.Context(), s)
			require.NoError(t, err, s)
		}
	}
	require.Equal(t, allVersions(t, bySQL), appliedVersions(t, bySQL))
	applied, err := migrate.Run(t.Context(), bySQL, tables.Default)
	require.NoError(t, err)
	require.Empty(t, applied, "Migrate finds every version applied")

	byMigrate := openDSN(t, scratchDatabase(t, "bq_test_migsql"), 0)
	require.NoError(t, bunqueue.Migrate(t.Context(), byMigrate))
	require.Equal(t, schemaOf(t, byMigrate), schemaOf(t, bySQL), "the script makes the tables Migrate makes")

	// The tables work.
	c := jobsTestClient(t, bySQL, bunqueue.Config{})
	var ran atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[migrationSQLArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[migrationSQLArgs]) error {
		ran.Add(1)
		return nil
	})))
	id := enqueueOne(t, c, bySQL, migrationSQLArgs{}, nil)
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return !jobExists(t, bySQL, id) }, "a job runs on the tables the script made")
	require.EqualValues(t, 1, ran.Load())
}

// countStatements is the number of schema statements over all migrations.
func countStatements() int {
	n := 0
	for _, m := range migrate.MySQL(tables.Default).Migrations {
		n += len(m.Statements)
	}
	return n
}

type explainArgs struct{}

func (explainArgs) Kind() string { return "t_explain" }

// The claim statement of a jobs queue, exactly as the engine sends it, is
// served by the bunqueue_jobs_claim index without a filesort, on the
// tables Migrate makes (in a database of the test's own, so that the
// schema is this code's, not the shared table's) holding thousands of jobs
// of several queues.
func TestJobClaimQueryUsesIndex(t *testing.T) {
	t.Parallel()
	dbtest.OnlyMySQL(t, "reads MySQL's EXPLAIN; PostgreSQL's plans are checked by the engine's Explain (plan_test, internal/sqldialect)")
	dsn := scratchDatabase(t, "bq_test_explain")
	db := openDSN(t, dsn, 0)
	ctx := t.Context()
	require.NoError(t, bunqueue.Migrate(ctx, db))
	queues := make([]string, 4)
	cfg := map[string]bunqueue.JobQueueConfig{}
	for i := range queues {
		queues[i] = jobQueue(t)
		cfg[queues[i]] = bunqueue.JobQueueConfig{}
	}
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: cfg})
	var jobs []bunqueue.EnqueueParams
	for i := range 4000 {
		o := &bunqueue.EnqueueOpts{Queue: queues[i%len(queues)], Priority: (i*7)%11 - 5}
		if i%10 == 0 {
			o.Delay = time.Hour
		}
		jobs = append(jobs, bunqueue.EnqueueParams{Args: explainArgs{}, Opts: o})
	}
	n, err := c.EnqueueMany(ctx, db, jobs)
	require.NoError(t, err)
	require.Equal(t, len(jobs), n)
	dbtest.Exec(t, db, "ANALYZE TABLE bunqueue_jobs")

	// Capture the statements of a queue with one job, as the engine sends
	// them: the feed's plain read of waiting ids, which walks the index,
	// and the claim, which locks the ids it read by primary key.
	probe := jobQueue(t)
	hooked := openDSN(t, dsn, 0)
	var log stmtLog
	hooked.AddQueryHook(&log)
	pc := jobsTestClient(t, hooked, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{probe: {BatchSize: 10}}})
	ran := make(chan struct{}, 1)
	require.NoError(t, bunqueue.AddWorker(pc, bunqueue.WorkerFunc[explainArgs](func(context.Context, bun.IDB, *bunqueue.Job[explainArgs]) error {
		ran <- struct{}{}
		return nil
	})))
	_, err = pc.Enqueue(ctx, db, explainArgs{}, &bunqueue.EnqueueOpts{Queue: probe})
	require.NoError(t, err)
	var read, claim string
	require.NoError(t, pc.Start(ctx))
	<-ran
	eventually(t, 10*time.Second, func() bool {
		for _, s := range log.matching("") {
			switch {
			case !strings.Contains(s.head, "SELECT ") || !strings.Contains(s.head, "'"+probe+"'"):
			case strings.Contains(s.head, "FOR UPDATE SKIP LOCKED"):
				claim = s.head
			case strings.Contains(s.head, "bunqueue: read"):
				read = s.head
			}
		}
		return claim != "" && read != ""
	}, "the engine reads and claims the probe queue")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, pc.Stop(stopCtx))
	t.Logf("read statement: %s", read)
	t.Logf("claim statement: %s", claim)
	for _, want := range []string{"bunqueue_jobs", "WHERE", "UTC_TIMESTAMP(6)", "ORDER BY", "LIMIT "} {
		require.Contains(t, read, want)
	}
	require.NotContains(t, read, " FOR ")
	for _, want := range []string{"bunqueue_jobs", "WHERE", "UTC_TIMESTAMP(6)", "`id` IN (", "FOR UPDATE SKIP LOCKED"} {
		require.Contains(t, claim, want)
	}

	for _, q := range queues {
		stmt := strings.ReplaceAll(read, "'"+probe+"'", "'"+q+"'")
		plan := explain(t, db, stmt)
		require.Len(t, plan, 1, "one table, no derived steps: %v", plan)
		p := plan[0]
		t.Logf("EXPLAIN read for %s: %v", q, p)
		require.Equal(t, "bunqueue_jobs_claim", p["key"], "the read uses the claim index: %v", p)
		require.NotEqual(t, "ALL", p["type"], "no full scan: %v", p)
		require.Contains(t, p["Extra"], "Using index", "the read needs only the index: %v", p)
		require.NotContains(t, p["Extra"], "filesort", "no filesort: %v", p)
		require.NotContains(t, p["Extra"], "temporary", "no temporary table: %v", p)
	}
	// The claim, for ten waiting jobs of each queue.
	inList := regexp.MustCompile("`id` IN \\([0-9, ]+\\)")
	require.Regexp(t, inList, claim)
	for _, q := range queues {
		var ids []string
		require.NoError(t, db.NewRaw("SELECT id FROM bunqueue_jobs WHERE queue = ? AND state = 0 AND run_at <= UTC_TIMESTAMP(6) ORDER BY id DESC LIMIT 10", q).Scan(ctx, &ids))
		require.Len(t, ids, 10)
		stmt := inList.ReplaceAllLiteralString(strings.ReplaceAll(claim, "'"+probe+"'", "'"+q+"'"), "`id` IN ("+strings.Join(ids, ", ")+")")
		plan := explain(t, db, stmt)
		require.Len(t, plan, 1, "one table, no derived steps: %v", plan)
		t.Logf("EXPLAIN claim for %s: %v", q, plan[0])
		require.Equal(t, "PRIMARY", plan[0]["key"], "the claim locks rows by primary key: %v", plan[0])
	}
}

// explain runs EXPLAIN on stmt and returns its rows, column by column.
func explain(t *testing.T, db *bun.DB, stmt string) []map[string]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+stmt)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		row := map[string]string{}
		for i, c := range cols {
			row[c] = vals[i].String
		}
		out = append(out, row)
	}
	require.NoError(t, rows.Err())
	return out
}
