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
)

// Table names.
const (
	JobsTable       = "bunqueue_jobs"
	FailedJobsTable = "bunqueue_failed_jobs"
	VersionsTable   = "bunqueue_migrations"
	lockName        = "bunqueue_migrate"
	lockWait        = 60 * time.Second
)

// Migration is one version of the schema.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Schema is the DDL of one database server.
type Schema struct {
	// Versions creates the table that records the applied versions.
	Versions string
	// Migrations lists every version, oldest first. Released versions
	// are never edited; a change is a new version, with the same number
	// on every server.
	Migrations []Migration
}

// For returns the schema of db's server.
func For(db *bun.DB) (Schema, error) {
	switch db.Dialect().Name() {
	case dialect.MySQL:
		return Schema{Versions: versionsDDL, Migrations: Migrations}, nil
	case dialect.PG:
		return Postgres, nil
	case dialect.SQLite:
		return SQLite, nil
	}
	_, err := sqldialect.For(db)
	return Schema{}, err
}

// Migrations lists every version of the MySQL and MariaDB schema, oldest
// first.
var Migrations = []Migration{
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
			`CREATE TABLE IF NOT EXISTS ` + JobsTable + ` (
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
	UNIQUE KEY bunqueue_jobs_unique_key (unique_key),
	KEY bunqueue_jobs_claim (queue, state, priority, run_at, id),
	KEY bunqueue_jobs_completed (state, completed_at, id)
) ENGINE=InnoDB`,
			`CREATE TABLE IF NOT EXISTS ` + FailedJobsTable + ` (
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
	KEY bunqueue_failed_jobs_queue (queue, kind, id),
	KEY bunqueue_failed_jobs_failed_at (failed_at, id)
) ENGINE=InnoDB`,
		},
	},
}

const versionsDDL = `CREATE TABLE IF NOT EXISTS ` + VersionsTable + ` (
	version INT NOT NULL PRIMARY KEY,
	name VARCHAR(255) NOT NULL,
	applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`

// SQL returns every statement of every migration, and the bookkeeping
// that records them, as one script for users who run their own migration
// tool: for MySQL and MariaDB.
func SQL() string {
	return Schema{Versions: versionsDDL, Migrations: Migrations}.SQL(sqldialect.MySQL{}, "MySQL 8.0.1+ / MariaDB 10.6+")
}

// SQL returns the schema as one script for server, through d.
func (s Schema) SQL(d sqldialect.Dialect, server string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- bunqueue schema for %s\n", server)
	b.WriteString(s.Versions + ";\n")
	head, tail := d.InsertIgnore()
	for _, m := range s.Migrations {
		fmt.Fprintf(&b, "\n-- version %d: %s\n", m.Version, m.Name)
		for _, st := range m.Statements {
			b.WriteString(st + ";\n")
		}
		fmt.Fprintf(&b, "%s %s (version, name, applied_at) VALUES (%d, '%s', %s)%s;\n",
			head, VersionsTable, m.Version, m.Name, d.Now(), tail)
	}
	return b.String()
}

// Latest is the newest schema version.
func Latest() int { return Migrations[len(Migrations)-1].Version }

// Run applies the missing migrations of db's server. It holds a named
// server lock (Dialect.Lock) on one connection while it works, so
// processes that start together apply each version once.
func Run(ctx context.Context, db *bun.DB) (applied []int, err error) {
	schema, err := For(db)
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

	if _, err := conn.ExecContext(ctx, schema.Versions); err != nil {
		return nil, err
	}
	done := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM "+VersionsTable)
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
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+VersionsTable+" (version, name, applied_at) VALUES (?, ?, "+d.Now()+")",
			m.Version, m.Name); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}
