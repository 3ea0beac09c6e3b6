// Package tables names the tables and indexes bunqueue keeps in a
// database: by default bunqueue_jobs and the others, or, for an app that
// shares its database, with its own prefix and, on PostgreSQL, in its own
// schema. Every statement on these tables takes its names from a Names.
package tables

import (
	"fmt"
	"regexp"
)

// DefaultPrefix begins every table's and index's name when the app gives
// none.
const DefaultPrefix = "bunqueue_"

// MaxPrefix is the longest prefix, in bytes: with the longest index name
// after it, a name stays within PostgreSQL's 63 and MySQL's 64 bytes.
const MaxPrefix = 40

// The tables, by their names after the prefix.
const (
	Jobs       = "jobs"
	FailedJobs = "failed_jobs"
	Queues     = "queues"
	Periodic   = "periodic"
	Slots      = "slots"
	Migrations = "migrations"
	Processes  = "processes"
	Probe      = "probe"
	// JobDeps holds the dependencies of the jobs of workflows: one row
	// per job and job it depends on.
	JobDeps = "job_deps"
	// Sequences holds the last job of each sequence that has one
	// unfinished or failed: one row per sequence key.
	Sequences = "sequences"
	// History holds the fleet's per-minute and per-quarter-hour counts of
	// each queue, and Leases the expiring rows that let one process at a
	// time do the history's upkeep.
	History = "history"
	Leases  = "leases"
)

// All lists the tables Migrate creates, by their names after the prefix.
// It is the one list that the docs, go doc and the command-line tool's
// help say.
var All = []string{Jobs, FailedJobs, Queues, Periodic, Slots, JobDeps, Sequences, Processes, History, Leases, Migrations}

// ident is a name the statements can hold unquoted: lowercase, so that
// PostgreSQL's folding of unquoted names and MySQL's case-sensitive table
// names on Linux agree with the catalogs' rows.
var ident = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Names is where one client's tables are: each field is a table's name as
// statements write it, qualified with the schema if there is one.
type Names struct {
	Jobs, FailedJobs, Queues, Periodic, Slots, JobDeps, Sequences, Processes, History, Leases, Migrations string
	// Probe is the two-row table whose rows the startup probe locks, which
	// Start creates if it is missing (Migrate does not).
	Probe string

	prefix, schema string
}

// Default is the names of the tables with no prefix or schema given.
var Default = mustNew("", "")

// New returns the names with prefix (DefaultPrefix if empty) and in
// schema ("" for the connection's default). field names the settings in
// errors, e.g. "Config.Tables".
func New(field, prefix, schema string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !ident.MatchString(prefix) || len(prefix) > MaxPrefix {
		return Names{}, fmt.Errorf("bunqueue: %s.Prefix %q must be at most %d bytes of lowercase letters, digits and underscores, not starting with a digit", field, prefix, MaxPrefix)
	}
	if schema != "" && (!ident.MatchString(schema) || len(schema) > 63) {
		return Names{}, fmt.Errorf("bunqueue: %s.Schema %q must be at most 63 bytes of lowercase letters, digits and underscores, not starting with a digit", field, schema)
	}
	n := Names{prefix: prefix, schema: schema}
	n.Jobs, n.FailedJobs, n.Queues = n.Table(Jobs), n.Table(FailedJobs), n.Table(Queues)
	n.Periodic, n.Slots, n.Migrations = n.Table(Periodic), n.Table(Slots), n.Table(Migrations)
	n.JobDeps, n.Processes, n.Probe = n.Table(JobDeps), n.Table(Processes), n.Table(Probe)
	n.Sequences, n.History, n.Leases = n.Table(Sequences), n.Table(History), n.Table(Leases)
	return n, nil
}

func mustNew(prefix, schema string) Names {
	n, err := New("Tables", prefix, schema)
	if err != nil {
		panic(err)
	}
	return n
}

// Prefix is what begins every name.
func (n Names) Prefix() string { return n.prefix }

// Schema is the PostgreSQL schema of the tables; "" for the connection's
// search_path.
func (n Names) Schema() string { return n.schema }

// Table returns the name of table (one of All) as statements write it.
func (n Names) Table(table string) string {
	if n.schema != "" {
		return n.schema + "." + n.prefix + table
	}
	return n.prefix + table
}

// Bare returns the name of table (one of All) without its schema, as the
// catalogs list it.
func (n Names) Bare(table string) string { return n.prefix + table }

// Index returns the name of an index, given without the prefix (e.g.
// "jobs_claim"). Indexes take the prefix, not the schema: PostgreSQL puts
// an index in its table's schema, and SQLite's index names are the
// database's, not the table's.
func (n Names) Index(name string) string { return n.prefix + name }

// List returns the tables' names, as statements write them, in All's
// order.
func (n Names) List() []string {
	names := make([]string, len(All))
	for i, t := range All {
		names[i] = n.Table(t)
	}
	return names
}
