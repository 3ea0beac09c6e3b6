// Package migrate creates and upgrades the tables of the jobs queue.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// The server lock that migrations take turns on, whatever the tables'
// names, and how long Run waits for it.
const (
	lockName = "bunqueue_migrate"
	lockWait = 60 * time.Second
)

// ClaimIndex is the jobs table's index that the claim query's conditions
// and order are on: (queue, state, priority, run_at, id). Index names are
// given without the prefix (tables.Names.Index).
const ClaimIndex = "jobs_claim"

// UniqueKeyIndex is the jobs table's unique index on unique_key.
const UniqueKeyIndex = "jobs_unique_key"

// Migration is one version of the schema.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Schema is the DDL of one database server, for one set of tables.
type Schema struct {
	// Prelude runs first: PostgreSQL's creates the tables' schema if it
	// is missing.
	Prelude []string
	// Table is the name of the table of the applied versions.
	Table string
	// Versions creates the table that records the applied versions.
	Versions string
	// Migrations lists every version, oldest first. Released versions
	// are never edited; a change is a new version, with the same number
	// on every server.
	Migrations []Migration
	// Rerun follows the INSERT that records a version in the script of
	// SQL, so that running the script again skips the versions it
	// recorded, and only that: any other error stays an error.
	Rerun string
}

// For returns the schema of db's server, for the tables n.
func For(db *bun.DB, n tables.Names) (Schema, error) {
	switch db.Dialect().Name() {
	case dialect.MySQL:
		return MySQL(n), nil
	case dialect.PG:
		return Postgres(n), nil
	case dialect.SQLite:
		return SQLite(n), nil
	}
	_, err := sqldialect.For(db)
	return Schema{}, err
}

// MySQL is the schema on MySQL and MariaDB, for the tables n.
func MySQL(n tables.Names) Schema {
	return Schema{Table: n.Migrations, Versions: versionsDDL(n), Migrations: mysqlMigrations(n), Rerun: " ON DUPLICATE KEY UPDATE version = version"}
}

// mysqlMigrations lists every version of the MySQL and MariaDB schema,
// oldest first.
func mysqlMigrations(n tables.Names) []Migration {
	return []Migration{
		{
			Version: 1,
			Name:    "jobs and failed jobs",
			Statements: []string{
				// state: 0 waiting (or leased, in lease mode), 1 completed
				// (kept only with Config.Retention). run_at is when the job may
				// run; in lease mode, while a job is leased, it is the lease's
				// end. trace_context holds the propagator's carrier of the span
				// that enqueued the job, as "key=value" lines. The claim index
				// serves
				//   WHERE queue = ? AND state = 0 AND run_at <= NOW(6)
				//   ORDER BY priority, run_at, id
				// without a filesort.
				`CREATE TABLE IF NOT EXISTS ` + n.Jobs + ` (
	id BIGINT NOT NULL AUTO_INCREMENT,
	queue VARCHAR(128) NOT NULL,
	kind VARCHAR(255) NOT NULL,
	args LONGBLOB NOT NULL,
	metadata LONGBLOB NULL,
	priority SMALLINT NOT NULL DEFAULT 0,
	state TINYINT NOT NULL DEFAULT 0,
	attempts INT NOT NULL DEFAULT 0,
	max_attempts INT NOT NULL,
	run_at DATETIME(6) NOT NULL,
	created_at DATETIME(6) NOT NULL,
	completed_at DATETIME(6) NULL,
	last_error TEXT NULL,
	unique_key VARCHAR(255) NULL,
	lease_token CHAR(32) NULL,
	trace_context VARBINARY(1024) NULL,
	PRIMARY KEY (id),
	UNIQUE KEY ` + n.Index("jobs_unique_key") + ` (unique_key),
	KEY ` + n.Index(ClaimIndex) + ` (queue, state, priority, run_at, id),
	KEY ` + n.Index("jobs_completed") + ` (state, completed_at, id)
) ENGINE=InnoDB`,
				`CREATE TABLE IF NOT EXISTS ` + n.FailedJobs + ` (
	id BIGINT NOT NULL AUTO_INCREMENT,
	job_id BIGINT NOT NULL,
	queue VARCHAR(128) NOT NULL,
	kind VARCHAR(255) NOT NULL,
	args LONGBLOB NOT NULL,
	metadata LONGBLOB NULL,
	priority SMALLINT NOT NULL,
	attempts INT NOT NULL,
	max_attempts INT NOT NULL,
	unique_key VARCHAR(255) NULL,
	error TEXT NOT NULL,
	created_at DATETIME(6) NOT NULL,
	failed_at DATETIME(6) NOT NULL,
	trace_context VARBINARY(1024) NULL,
	PRIMARY KEY (id),
	KEY ` + n.Index("failed_jobs_queue") + ` (queue, kind, id),
	KEY ` + n.Index("failed_jobs_failed_at") + ` (failed_at, id)
) ENGINE=InnoDB`,
			},
		},
		{
			Version: 2,
			Name:    "queue, kind and unique_key compare exactly",
			// Version 1's columns took the database's default collation
			// (utf8mb4_general_ci, utf8mb4_0900_ai_ci), which makes "Key",
			// "key" and "key " one unique key, and a worker of queue "mail"
			// claim the jobs of "Mail" and "mail ". utf8mb4_bin still pads
			// (PAD SPACE), and the collations that do not differ between
			// MySQL and MariaDB: VARBINARY compares bytes, on both. Each
			// column first becomes utf8mb4, so that a latin1 table's text
			// turns into the UTF-8 bytes bunqueue reads and writes; MODIFY
			// keeps the indexes, and the rows keep their values.
			Statements: []string{
				exactColumns(n.Jobs, "VARCHAR(%d) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
				exactColumns(n.Jobs, "VARBINARY(%d)"),
				exactColumns(n.FailedJobs, "VARCHAR(%d) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
				exactColumns(n.FailedJobs, "VARBINARY(%d)"),
			},
		},
		{
			Version: 3,
			Name:    "queue controls",
			// One row per queue that was ever paused, table queues and jobs
			// queues alike, by name; paused_at is NULL while it runs.
			Statements: []string{
				`CREATE TABLE IF NOT EXISTS ` + n.Queues + ` (
	name VARBINARY(128) NOT NULL,
	paused_at DATETIME(6) NULL,
	updated_at DATETIME(6) NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB`,
			},
		},
		{
			Version: 4,
			Name:    "job output and job listing indexes",
			// output holds what a worker recorded with RecordOutput, as JSON,
			// for a job kept completed. The listing indexes serve JobList, newest
			// first (ORDER BY id DESC) under each filter it has an equality
			// for: state alone, state and queue, state and kind on the jobs
			// table; job_id alone, queue and kind on the failed jobs (JobGet
			// finds a failed job by its job_id). Each statement checks first
			// whether its change is there, so that MigrationSQL's script can
			// run twice: MySQL 8 has no ADD COLUMN IF NOT EXISTS.
			Statements: append(
				ifMissing("COLUMNS", n.Bare(tables.Jobs), "column_name = 'output'", `ALTER TABLE `+n.Jobs+` ADD COLUMN output LONGBLOB NULL,
	ADD KEY `+n.Index(ListStateIndex)+` (state, id),
	ADD KEY `+n.Index(ListQueueIndex)+` (state, queue, id),
	ADD KEY `+n.Index(ListKindIndex)+` (state, kind, id)`),
				ifMissing("STATISTICS", n.Bare(tables.FailedJobs), "index_name = '"+n.Index(FailedJobIDIndex)+"'", `ALTER TABLE `+n.FailedJobs+`
	ADD KEY `+n.Index(FailedJobIDIndex)+` (job_id),
	ADD KEY `+n.Index(FailedListQueueIndex)+` (queue, job_id),
	ADD KEY `+n.Index(FailedListKindIndex)+` (kind, job_id)`)...),
		},
		{
			Version:    5,
			Name:       "periodic jobs",
			Statements: []string{periodicDDL(n)},
		},
		{
			Version: 6,
			Name:    "concurrency slots",
			// The slots of a queue's limits, by kind (slotsql.Concurrency,
			// ...) and key ('' for the whole queue): slots 0 to limit-1,
			// created at Start. A lock-mode worker holds one by locking its
			// row in the claim transaction; a lease-mode worker by setting
			// holder to its lease's token and held_until to the lease's end,
			// extended with the lease.
			Statements: []string{
				`CREATE TABLE IF NOT EXISTS ` + n.Slots + ` (
	queue VARBINARY(128) NOT NULL,
	kind SMALLINT NOT NULL,
	slot_key VARBINARY(255) NOT NULL,
	slot INT NOT NULL,
	holder CHAR(32) NULL,
	held_until DATETIME(6) NULL,
	PRIMARY KEY (queue, kind, slot_key, slot)
) ENGINE=InnoDB`,
			},
		},
		{
			Version: 7,
			Name:    "limit keys",
			// limit_key is a job's EnqueueOpts.LimitKey, for its queue's
			// KeyLimit; a failed job keeps it, for its replay. Each ALTER
			// checks first that its column is missing, so that MigrationSQL's
			// script can run twice: MySQL 8 has no ADD COLUMN IF NOT EXISTS.
			Statements: append(
				ifMissing("COLUMNS", n.Bare(tables.Jobs), "column_name = 'limit_key'", `ALTER TABLE `+n.Jobs+` ADD COLUMN limit_key VARBINARY(255) NULL`),
				ifMissing("COLUMNS", n.Bare(tables.FailedJobs), "column_name = 'limit_key'", `ALTER TABLE `+n.FailedJobs+` ADD COLUMN limit_key VARBINARY(255) NULL`)...),
		},
		{
			Version: 8,
			Name:    "attempt errors",
			// attempt_errors is the JSON array of a job's failed attempts,
			// oldest first, each {"attempt": n, "at_us": microseconds since
			// the Unix epoch, "error": text}; NULL for none. A failed job
			// keeps its job's. Text in utf8mb4, whatever the table's default
			// character set, as the JSON functions write it; MEDIUMTEXT, as a
			// TEXT's 65,535 bytes would not hold the kept attempts. Each ALTER
			// checks first that its column is missing, as version 7's do.
			Statements: append(
				ifMissing("COLUMNS", n.Bare(tables.Jobs), "column_name = '"+AttemptErrorsColumn+"'", `ALTER TABLE `+n.Jobs+` ADD COLUMN `+AttemptErrorsColumn+` `+attemptErrorsType),
				ifMissing("COLUMNS", n.Bare(tables.FailedJobs), "column_name = '"+AttemptErrorsColumn+"'", `ALTER TABLE `+n.FailedJobs+` ADD COLUMN `+AttemptErrorsColumn+` `+attemptErrorsType)...),
		},
		{
			Version: 9,
			Name:    "job dependencies",
			// flow is a job's place in a workflow, bits: 1 other jobs
			// depend on it, 2 it depends on others; 0 for every other job,
			// whose completion runs no statement on the dependencies. A job
			// that waits for its dependencies has state 2 (blocked), which
			// the claim index's state = 0 never reads. One row of job_deps
			// per job (job_id) and job it depends on (depends_on), kept
			// until the dependent finishes: name is the dependency's name in
			// its group, policy what its failure does (1 cancel the
			// dependent, 2 ignore it), done 1 once it completed. The ALTER
			// checks first that its column is missing, as version 7's do.
			Statements: append(
				ifMissing("COLUMNS", n.Bare(tables.Jobs), "column_name = '"+FlowColumn+"'", `ALTER TABLE `+n.Jobs+` ADD COLUMN `+FlowColumn+` TINYINT NOT NULL DEFAULT 0`),
				`CREATE TABLE IF NOT EXISTS `+n.JobDeps+` (
	job_id BIGINT NOT NULL,
	depends_on BIGINT NOT NULL,
	name VARBINARY(255) NOT NULL,
	policy TINYINT NOT NULL,
	done TINYINT NOT NULL DEFAULT 0,
	PRIMARY KEY (job_id, depends_on),
	KEY `+n.Index(DepsOnIndex)+` (depends_on, job_id)
) ENGINE=InnoDB`),
		},
		{
			Version: 10,
			Name:    "process registry",
			// One row per started client: who it is, its queues as JSON
			// (queues), and its heartbeat. stale_at is when the others
			// take it for dead unless it beats again; forget_at when any
			// process's heartbeat may delete the row.
			Statements: []string{
				`CREATE TABLE IF NOT EXISTS ` + n.Processes + ` (
	id VARBINARY(32) NOT NULL,
	name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	host VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	pid BIGINT NOT NULL,
	version VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	started_at DATETIME(6) NOT NULL,
	heartbeat_at DATETIME(6) NOT NULL,
	stale_at DATETIME(6) NOT NULL,
	forget_at DATETIME(6) NOT NULL,
	queues MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	PRIMARY KEY (id),
	KEY ` + n.Index("processes_forget_at") + ` (forget_at)
) ENGINE=InnoDB`,
			},
		},
		{
			Version: 11,
			Name:    "sequences",
			// One row per sequence key whose last job (tail) has not
			// completed: the enqueue of the key's next job locks it, reads
			// the tail, and makes the new job wait for it; the tail's
			// completion sets tail to 0 (the row stays: deleting it would
			// make concurrent enqueues' inserts of the key deadlock on
			// their next-key locks). A job of a sequence has flow bit 4.
			Statements: []string{
				`CREATE TABLE IF NOT EXISTS ` + n.Sequences + ` (
	seq_key VARBINARY(255) NOT NULL,
	tail BIGINT NOT NULL,
	PRIMARY KEY (seq_key),
	KEY ` + n.Index(SequencesTailIndex) + ` (tail)
) ENGINE=InnoDB`,
			},
		},
		{
			Version: 12,
			Name:    "fleet history",
			// history: one row per queue, resolution (res, 60 or 900 s)
			// and bucket (its start in Unix seconds, database clock),
			// holding the fleet's sums, which processes add to with
			// upserts; w00 to w23 count the waits before start by bucket
			// (histsql.WaitBuckets); depth is the largest sample, -1 for
			// none. leases: one row per lease (histsql.UpkeepLease), held
			// by the process whose id is holder until expires_at.
			Statements: []string{
				`CREATE TABLE IF NOT EXISTS ` + n.History + ` (
	queue VARBINARY(255) NOT NULL,
	res INT NOT NULL,
	bucket BIGINT NOT NULL,
	processed BIGINT NOT NULL DEFAULT 0,
	failed BIGINT NOT NULL DEFAULT 0,
	started BIGINT NOT NULL DEFAULT 0,
	w00 BIGINT NOT NULL DEFAULT 0,
	w01 BIGINT NOT NULL DEFAULT 0,
	w02 BIGINT NOT NULL DEFAULT 0,
	w03 BIGINT NOT NULL DEFAULT 0,
	w04 BIGINT NOT NULL DEFAULT 0,
	w05 BIGINT NOT NULL DEFAULT 0,
	w06 BIGINT NOT NULL DEFAULT 0,
	w07 BIGINT NOT NULL DEFAULT 0,
	w08 BIGINT NOT NULL DEFAULT 0,
	w09 BIGINT NOT NULL DEFAULT 0,
	w10 BIGINT NOT NULL DEFAULT 0,
	w11 BIGINT NOT NULL DEFAULT 0,
	w12 BIGINT NOT NULL DEFAULT 0,
	w13 BIGINT NOT NULL DEFAULT 0,
	w14 BIGINT NOT NULL DEFAULT 0,
	w15 BIGINT NOT NULL DEFAULT 0,
	w16 BIGINT NOT NULL DEFAULT 0,
	w17 BIGINT NOT NULL DEFAULT 0,
	w18 BIGINT NOT NULL DEFAULT 0,
	w19 BIGINT NOT NULL DEFAULT 0,
	w20 BIGINT NOT NULL DEFAULT 0,
	w21 BIGINT NOT NULL DEFAULT 0,
	w22 BIGINT NOT NULL DEFAULT 0,
	w23 BIGINT NOT NULL DEFAULT 0,
	wait_max_us BIGINT NOT NULL DEFAULT 0,
	depth BIGINT NOT NULL DEFAULT -1,
	PRIMARY KEY (queue, res, bucket)
) ENGINE=InnoDB`,
				`CREATE TABLE IF NOT EXISTS ` + n.Leases + ` (
	name VARBINARY(64) NOT NULL,
	holder VARBINARY(32) NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB`,
			},
		},
	}
}

// FlowColumn is the jobs table's column of version 9 that says whether a
// job has dependents or dependencies.
const FlowColumn = "flow"

// SequencesTailIndex is the index of version 11 on sequences (tail): the
// sequence whose last job a job is.
const SequencesTailIndex = "sequences_tail"

// DepsOnIndex is the index of version 9 on job_deps (depends_on, job_id):
// the dependents of a job.
const DepsOnIndex = "job_deps_on"

// AttemptErrorsColumn is the column of version 8, on the jobs and the
// failed jobs, that holds a job's failed attempts.
const AttemptErrorsColumn = "attempt_errors"

// attemptErrorsType is the type of AttemptErrorsColumn on MySQL and
// MariaDB.
const attemptErrorsType = "MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"

// The indexes of version 4 that serve JobList and JobGet.
const (
	ListStateIndex       = "jobs_list_state"
	ListQueueIndex       = "jobs_list_queue"
	ListKindIndex        = "jobs_list_kind"
	FailedJobIDIndex     = "failed_jobs_job_id"
	FailedListQueueIndex = "failed_jobs_list_queue"
	FailedListKindIndex  = "failed_jobs_list_kind"
)

// ifMissing returns the statements that run ddl on MySQL and MariaDB
// only if table has no row in information_schema's view (COLUMNS,
// STATISTICS) that matches cond: a prepared statement of the session,
// which Run keeps on one connection, as the script does. table is the
// name as the catalog lists it.
func ifMissing(view, table, cond, ddl string) []string {
	return []string{
		"SET @bunqueue_ddl = (SELECT IF(COUNT(*) = 0, '" + strings.ReplaceAll(ddl, "'", "''") + "', 'DO 0') FROM information_schema." + view +
			" WHERE table_schema = DATABASE() AND table_name = '" + table + "' AND " + cond + ")",
		"PREPARE bunqueue_ddl FROM @bunqueue_ddl",
		"EXECUTE bunqueue_ddl",
		"DEALLOCATE PREPARE bunqueue_ddl",
	}
}

// periodicDDL is version 5 on MySQL and MariaDB: one row per periodic
// job, by name. next_tick is the first tick not yet enqueued (or
// skipped), last_tick the latest enqueued, both microseconds since the
// Unix epoch: numbers, so that a driver's time zone cannot shift them,
// and compared exactly by the compare-and-set that enqueues a tick once.
// schedule describes the schedule that set next_tick.
func periodicDDL(n tables.Names) string {
	return `CREATE TABLE IF NOT EXISTS ` + n.Periodic + ` (
	name VARBINARY(128) NOT NULL,
	schedule VARBINARY(1024) NOT NULL,
	next_tick BIGINT NOT NULL,
	last_tick BIGINT NULL,
	updated_at DATETIME(6) NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB`
}

// exactColumns is the ALTER TABLE of version 2 that gives the queue, kind
// and unique_key columns of table the type typ, a format of their size.
func exactColumns(table, typ string) string {
	return fmt.Sprintf("ALTER TABLE %s MODIFY queue "+typ+" NOT NULL, MODIFY kind "+typ+" NOT NULL, MODIFY unique_key "+typ+" NULL",
		table, 128, 255, 255)
}

// versionsDDL creates the table of the applied versions on MySQL and
// MariaDB.
func versionsDDL(n tables.Names) string {
	return `CREATE TABLE IF NOT EXISTS ` + n.Migrations + ` (
	version INT NOT NULL PRIMARY KEY,
	name VARCHAR(255) NOT NULL,
	applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`
}

// SQL returns every statement of every migration, and the bookkeeping
// that records them, as one script for users who run their own migration
// tool: for MySQL and MariaDB.
func SQL(n tables.Names) string {
	return MySQL(n).SQL(sqldialect.MySQL{}, "MySQL 8.0.1+ / MariaDB 10.6+")
}

// SQL returns the schema as one script for server, through d.
func (s Schema) SQL(d sqldialect.Dialect, server string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- bunqueue schema for %s\n", server)
	for _, st := range s.Prelude {
		b.WriteString(st + ";\n")
	}
	b.WriteString(s.Versions + ";\n")
	for _, m := range s.Migrations {
		fmt.Fprintf(&b, "\n-- version %d: %s\n", m.Version, m.Name)
		for _, st := range m.Statements {
			b.WriteString(st + ";\n")
		}
		fmt.Fprintf(&b, "INSERT INTO %s (version, name, applied_at) VALUES (%d, '%s', %s)%s;\n",
			s.Table, m.Version, m.Name, d.Now(), s.Rerun)
	}
	return b.String()
}

// Latest is the newest schema version.
func Latest() int {
	m := mysqlMigrations(tables.Default)
	return m[len(m)-1].Version
}

// Run applies the missing migrations of db's server to the tables n. It holds a named
// server lock (Dialect.Lock) on one connection while it works, so
// processes that start together apply each version once. On PostgreSQL
// and SQLite the lock is a transaction's, which the migrations run in: a
// failure keeps none of them, whatever applied lists.
func Run(ctx context.Context, db *bun.DB, n tables.Names) (applied []int, err error) {
	schema, err := For(db, n)
	if err != nil {
		return nil, err
	}
	d, err := sqldialect.For(db)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	unlock, err := d.Lock(ctx, conn, lockName, lockWait)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil && err == nil {
			applied, err = nil, uerr
		}
	}()

	for _, st := range append(schema.Prelude, schema.Versions) {
		if _, err := conn.ExecContext(ctx, st); err != nil {
			return nil, err
		}
	}
	done := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM "+schema.Table)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	for _, m := range schema.Migrations {
		if done[m.Version] {
			continue
		}
		for _, s := range m.Statements {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				return applied, fmt.Errorf("version %d (%s): %w", m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+schema.Table+" (version, name, applied_at) VALUES (?, ?, "+d.Now()+")",
			m.Version, m.Name); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}
