package migrate

import "github.com/bunqueue/bunqueue/internal/tables"

// SQLite is the schema on SQLite: the same tables, columns and indexes as
// on MySQL, in SQLite's types. id is an INTEGER PRIMARY KEY, the rowid,
// with AUTOINCREMENT so that a deleted job's id is never given again.
// Every time is declared DATETIME and stored as TEXT in UTC with an offset
// ("2006-01-02 15:04:05.999999+00:00"), as bun's sqlitedialect writes
// times and the dialect's Now renders the clock: such strings compare as
// the times they stand for, and the driver reads a DATETIME column into a
// time.Time. Payloads are BLOBs, which round-trip byte for byte. Each
// migration keeps its MySQL number.
func SQLite(n tables.Names) Schema {
	return Schema{
		Table: n.Migrations,
		Versions: `CREATE TABLE IF NOT EXISTS ` + n.Migrations + ` (
	version INTEGER NOT NULL PRIMARY KEY,
	name TEXT NOT NULL,
	applied_at DATETIME NOT NULL
)`,
		Migrations: []Migration{
			{
				Version: 1,
				Name:    "jobs and failed jobs",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Jobs + ` (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	queue TEXT NOT NULL,
	kind TEXT NOT NULL,
	args BLOB NOT NULL,
	metadata BLOB NULL,
	priority INTEGER NOT NULL DEFAULT 0,
	state INTEGER NOT NULL DEFAULT 0,
	attempts INTEGER NOT NULL DEFAULT 0,
	max_attempts INTEGER NOT NULL,
	run_at DATETIME NOT NULL,
	created_at DATETIME NOT NULL,
	completed_at DATETIME NULL,
	last_error TEXT NULL,
	unique_key TEXT NULL,
	lease_token TEXT NULL,
	trace_context BLOB NULL
)`,
					`CREATE UNIQUE INDEX IF NOT EXISTS ` + n.Index("jobs_unique_key") + ` ON ` + n.Jobs + ` (unique_key)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(ClaimIndex) + ` ON ` + n.Jobs + ` (queue, state, priority, run_at, id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index("jobs_completed") + ` ON ` + n.Jobs + ` (state, completed_at, id)`,
					`CREATE TABLE IF NOT EXISTS ` + n.FailedJobs + ` (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id INTEGER NOT NULL,
	queue TEXT NOT NULL,
	kind TEXT NOT NULL,
	args BLOB NOT NULL,
	metadata BLOB NULL,
	priority INTEGER NOT NULL,
	attempts INTEGER NOT NULL,
	max_attempts INTEGER NOT NULL,
	unique_key TEXT NULL,
	error TEXT NOT NULL,
	created_at DATETIME NOT NULL,
	failed_at DATETIME NOT NULL,
	trace_context BLOB NULL
)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index("failed_jobs_queue") + ` ON ` + n.FailedJobs + ` (queue, kind, id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index("failed_jobs_failed_at") + ` ON ` + n.FailedJobs + ` (failed_at, id)`,
				},
			},
			{
				Version: 2,
				Name:    "queue, kind and unique_key compare exactly",
				// Nothing to change: TEXT columns compare with the BINARY
				// collation, byte for byte, with no padding.
			},
			{
				Version: 3,
				Name:    "queue controls",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Queues + ` (
	name TEXT NOT NULL PRIMARY KEY,
	paused_at DATETIME NULL,
	updated_at DATETIME NOT NULL
)`,
				},
			},
			{
				Version: 4,
				Name:    "job output and job listing indexes",
				Statements: []string{
					`ALTER TABLE ` + n.Jobs + ` ADD COLUMN output BLOB NULL`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(ListStateIndex) + ` ON ` + n.Jobs + ` (state, id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(ListQueueIndex) + ` ON ` + n.Jobs + ` (state, queue, id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(ListKindIndex) + ` ON ` + n.Jobs + ` (state, kind, id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(FailedJobIDIndex) + ` ON ` + n.FailedJobs + ` (job_id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(FailedListQueueIndex) + ` ON ` + n.FailedJobs + ` (queue, job_id)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(FailedListKindIndex) + ` ON ` + n.FailedJobs + ` (kind, job_id)`,
				},
			},
			{
				Version: 5,
				Name:    "periodic jobs",
				// As on MySQL: ticks are microseconds since the Unix epoch.
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Periodic + ` (
	name TEXT NOT NULL PRIMARY KEY,
	schedule TEXT NOT NULL,
	next_tick INTEGER NOT NULL,
	last_tick INTEGER NULL,
	updated_at DATETIME NOT NULL
)`,
				},
			},
			{
				Version: 6,
				Name:    "concurrency slots",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Slots + ` (
	queue TEXT NOT NULL,
	kind INTEGER NOT NULL,
	slot_key TEXT NOT NULL,
	slot INTEGER NOT NULL,
	holder CHAR(32) NULL,
	held_until DATETIME NULL,
	PRIMARY KEY (queue, kind, slot_key, slot)
)`,
				},
			},
			{
				Version: 7,
				Name:    "limit keys",
				Statements: []string{
					`ALTER TABLE ` + n.Jobs + ` ADD COLUMN limit_key TEXT NULL`,
					`ALTER TABLE ` + n.FailedJobs + ` ADD COLUMN limit_key TEXT NULL`,
				},
			},
			{
				Version: 8,
				Name:    "attempt errors",
				// JSON as text, which json1's functions read and write.
				Statements: []string{
					`ALTER TABLE ` + n.Jobs + ` ADD COLUMN ` + AttemptErrorsColumn + ` TEXT NULL`,
					`ALTER TABLE ` + n.FailedJobs + ` ADD COLUMN ` + AttemptErrorsColumn + ` TEXT NULL`,
				},
			},
			{
				Version: 9,
				Name:    "job dependencies",
				Statements: []string{
					`ALTER TABLE ` + n.Jobs + ` ADD COLUMN ` + FlowColumn + ` INTEGER NOT NULL DEFAULT 0`,
					`CREATE TABLE IF NOT EXISTS ` + n.JobDeps + ` (
	job_id INTEGER NOT NULL,
	depends_on INTEGER NOT NULL,
	name TEXT NOT NULL,
	policy INTEGER NOT NULL,
	done INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job_id, depends_on)
)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(DepsOnIndex) + ` ON ` + n.JobDeps + ` (depends_on, job_id)`,
				},
			},
			{
				Version: 10,
				Name:    "process registry",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Processes + ` (
	id TEXT NOT NULL PRIMARY KEY,
	name TEXT NOT NULL,
	host TEXT NOT NULL,
	pid INTEGER NOT NULL,
	version TEXT NOT NULL,
	started_at DATETIME NOT NULL,
	heartbeat_at DATETIME NOT NULL,
	stale_at DATETIME NOT NULL,
	forget_at DATETIME NOT NULL,
	queues TEXT NOT NULL
)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index("processes_forget_at") + ` ON ` + n.Processes + ` (forget_at)`,
				},
			},
			{
				Version: 11,
				Name:    "sequences",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.Sequences + ` (
	seq_key TEXT NOT NULL PRIMARY KEY,
	tail INTEGER NOT NULL
)`,
					`CREATE INDEX IF NOT EXISTS ` + n.Index(SequencesTailIndex) + ` ON ` + n.Sequences + ` (tail)`,
				},
			},
			{
				Version: 12,
				Name:    "fleet history",
				Statements: []string{
					`CREATE TABLE IF NOT EXISTS ` + n.History + ` (
	queue TEXT NOT NULL,
	res INTEGER NOT NULL,
	bucket INTEGER NOT NULL,
	processed INTEGER NOT NULL DEFAULT 0,
	failed INTEGER NOT NULL DEFAULT 0,
	started INTEGER NOT NULL DEFAULT 0,
	w00 INTEGER NOT NULL DEFAULT 0,
	w01 INTEGER NOT NULL DEFAULT 0,
	w02 INTEGER NOT NULL DEFAULT 0,
	w03 INTEGER NOT NULL DEFAULT 0,
	w04 INTEGER NOT NULL DEFAULT 0,
	w05 INTEGER NOT NULL DEFAULT 0,
	w06 INTEGER NOT NULL DEFAULT 0,
	w07 INTEGER NOT NULL DEFAULT 0,
	w08 INTEGER NOT NULL DEFAULT 0,
	w09 INTEGER NOT NULL DEFAULT 0,
	w10 INTEGER NOT NULL DEFAULT 0,
	w11 INTEGER NOT NULL DEFAULT 0,
	w12 INTEGER NOT NULL DEFAULT 0,
	w13 INTEGER NOT NULL DEFAULT 0,
	w14 INTEGER NOT NULL DEFAULT 0,
	w15 INTEGER NOT NULL DEFAULT 0,
	w16 INTEGER NOT NULL DEFAULT 0,
	w17 INTEGER NOT NULL DEFAULT 0,
	w18 INTEGER NOT NULL DEFAULT 0,
	w19 INTEGER NOT NULL DEFAULT 0,
	w20 INTEGER NOT NULL DEFAULT 0,
	w21 INTEGER NOT NULL DEFAULT 0,
	w22 INTEGER NOT NULL DEFAULT 0,
	w23 INTEGER NOT NULL DEFAULT 0,
	wait_max_us INTEGER NOT NULL DEFAULT 0,
	depth INTEGER NOT NULL DEFAULT -1,
	PRIMARY KEY (queue, res, bucket)
)`,
					`CREATE TABLE IF NOT EXISTS ` + n.Leases + ` (
	name TEXT NOT NULL PRIMARY KEY,
	holder TEXT NOT NULL,
	expires_at DATETIME NOT NULL
)`,
				},
			},
		},
		Rerun: " ON CONFLICT DO NOTHING",
	}
}
