package bunqueue

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// Tables says where bunqueue keeps its own tables: their names and their
// indexes' begin with Prefix, and on PostgreSQL they may be in Schema. The
// zero value is the default: the tables
//
//	bunqueue_jobs          the jobs that wait, run, or are kept completed
//	bunqueue_failed_jobs   the jobs that failed for good or were cancelled
//	bunqueue_queues        the paused queues
//	bunqueue_periodic      the periodic jobs' ticks
//	bunqueue_slots         the slots of GlobalLimit, KeyLimit and RateLimit
//	bunqueue_job_deps      the dependencies of workflows' jobs (EnqueueWorkflow)
//	bunqueue_sequences     the last job of each sequence (EnqueueOpts.Sequence)
//	bunqueue_processes     the started clients and their heartbeats
//	bunqueue_history       the fleet's counts by minute and quarter hour
//	bunqueue_leases        the lease of the fleet's upkeep
//	bunqueue_migrations    the schema versions applied
//
// which Migrate creates, in the connection's database (on PostgreSQL, the
// first schema of its search_path), and bunqueue_probe, a two-row table
// that Start creates to prove the server skips locked rows.
//
// Apps, or parts of one app, that share a database keep apart with
// Tables of their own: a client reads and writes only its own tables, so
// it never sees another's jobs, failed jobs, pauses, periodic ticks or
// limit slots. Give the same Tables to Config.Tables, to Tables.Migrate,
// and to the command-line tool (--prefix, --schema). Queues over the app's
// own tables are unaffected, but for the probe, their pauses and their
// limits.
type Tables struct {
	// Prefix begins every table's and index's name in place of
	// "bunqueue_": "shop_q_" names the jobs table shop_q_jobs. At most 40
	// bytes of lowercase letters, digits and underscores, not starting
	// with a digit; "" is "bunqueue_".
	Prefix string
	// Schema is the PostgreSQL schema of the tables, which Migrate
	// creates if it is missing; "" is the first schema of the
	// connection's search_path. Lowercase letters, digits and
	// underscores. MySQL, MariaDB and SQLite have no schemas within a
	// database: use Prefix there.
	Schema string
}

// names checks t, for a server of kind system (bun's dialect name, ""
// not to check Schema), and returns its names; field names t in errors.
func (t Tables) names(field string, system dialect.Name) (tables.Names, error) {
	n, err := tables.New(field, t.Prefix, t.Schema)
	if err != nil {
		return tables.Names{}, err
	}
	if t.Schema != "" && system != dialect.Invalid && system != dialect.PG {
		return tables.Names{}, fmt.Errorf("bunqueue: %s.Schema %q: schemas are for PostgreSQL; on %s, set %s.Prefix instead", field, t.Schema, system, field)
	}
	return n, nil
}

// Names returns the names of the tables Migrate creates, as statements
// write them (with the schema, if there is one), in the order of the
// list above; it panics if t is not valid (see Config.Tables).
func (t Tables) Names() []string {
	n, err := t.names("Tables", dialect.Invalid)
	if err != nil {
		panic(err)
	}
	return n.List()
}

// String returns the tables' names, comma-separated.
func (t Tables) String() string { return strings.Join(t.Names(), ", ") }

// Migrate creates or upgrades the tables of t in db (see Migrate).
func (t Tables) Migrate(ctx context.Context, db *bun.DB) error {
	n, err := t.names("Tables", db.Dialect().Name())
	if err != nil {
		return err
	}
	return runMigrate(ctx, db, n)
}

// MigrationSQL returns the SQL that Migrate runs on MySQL and MariaDB for
// the tables of t (see MigrationSQL); it panics if t is not valid.
func (t Tables) MigrationSQL() string {
	n, err := t.names("Tables", dialect.MySQL)
	if err != nil {
		panic(err)
	}
	return migrate.SQL(n)
}

// migrateHint says how to create or upgrade the client's tables, for its
// errors.
func (c *Client) migrateHint() string {
	t := c.cfg.Tables
	if t == (Tables{}) {
		return "bunqueue.Migrate, or `bunqueue migrate`"
	}
	flags := "--prefix " + c.tables.Prefix()
	if t.Schema != "" {
		flags += " --schema " + t.Schema
	}
	return "Config.Tables.Migrate, or `bunqueue migrate " + flags + "`"
}
