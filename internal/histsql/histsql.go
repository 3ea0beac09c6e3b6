// Package histsql holds the statements on the history table, where every
// process of a fleet adds its per-minute counts of each queue, and on the
// leases table, whose expiring rows let one process at a time do the
// fleet's upkeep (sampling depth, rolling minutes up into quarter hours,
// deleting old rows) without a leader service.
//
// A row of the history table is one queue's counts over one bucket of
// time: a minute (Minute) or a quarter hour (Quarter), keyed by the
// bucket's start in Unix seconds on the database clock. Processes add to
// it with additive upserts, so that no process reads another's counts and
// the rows hold the fleet's sums.
package histsql

import (
	"fmt"
	"strings"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// The resolutions of the history rows, in seconds: the res column.
const (
	Minute  = 60
	Quarter = 15 * 60
)

// KeepMinutes is how long minute rows are kept before the roll-up moves
// them into quarter-hour rows, and KeepQuarters how long those are kept,
// both in seconds after their bucket's start.
const (
	KeepMinutes  = 60 * 60
	KeepQuarters = 24 * 60 * 60
)

// SQL is the statements on the history and leases tables of one kind of
// server.
type SQL struct {
	d sqldialect.Dialect
	t tables.Names
}

// New returns the statements of d's server on the tables of t.
func New(d sqldialect.Dialect, t tables.Names) SQL { return SQL{d: d, t: t} }

// Table is the history table's name.
func (s SQL) Table() string { return s.t.History }

// mysql reports whether the server is MySQL or MariaDB.
func (s SQL) mysql() bool { return s.d.System() == "mysql" }

// bucketNow is the SQL of the start of the database clock's current
// bucket of res seconds, in Unix seconds.
func (s SQL) bucketNow(res int) string {
	div := " / "
	if s.mysql() {
		div = " DIV " // MySQL's / gives a decimal
	}
	return fmt.Sprintf("((%s)%s%d) * %d", s.d.NowMicros(), div, res*1_000_000, res)
}

// nowSeconds is the SQL of the database clock in Unix seconds.
func (s SQL) nowSeconds() string {
	if s.mysql() {
		return "((" + s.d.NowMicros() + ") DIV 1000000)"
	}
	return "((" + s.d.NowMicros() + ") / 1000000)"
}

// countCols are the additive columns of a history row, in the order Add
// and Roll write them: the counts, then the wait histogram's buckets.
func countCols() []string {
	cols := []string{"processed", "failed", "started"}
	for i := range WaitBuckets {
		cols = append(cols, WaitColumn(i))
	}
	return cols
}

// maxCols are the columns a merge keeps the larger of: the longest wait
// and the depth (-1: not sampled).
var maxCols = []string{"wait_max_us", "depth"}

// upsert is the clause after an INSERT into the history table (aliased h)
// that merges each new row into the one of its key: the counts added,
// the maxima kept.
func (s SQL) upsert() string {
	var set []string
	if s.mysql() {
		for _, c := range countCols() {
			set = append(set, c+" = "+c+" + VALUES("+c+")")
		}
		for _, c := range maxCols {
			set = append(set, c+" = GREATEST("+c+", VALUES("+c+"))")
		}
		return " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	}
	greatest := "GREATEST"
	if s.d.System() == "sqlite" {
		greatest = "MAX" // SQLite's MAX of two or more arguments
	}
	for _, c := range countCols() {
		set = append(set, c+" = h."+c+" + excluded."+c)
	}
	for _, c := range maxCols {
		set = append(set, c+" = "+greatest+"(h."+c+", excluded."+c+")")
	}
	return " ON CONFLICT (queue, res, bucket) DO UPDATE SET " + strings.Join(set, ", ")
}

// into is the start of an INSERT into the history table of every column.
func (s SQL) into() string {
	alias := " AS h"
	if s.mysql() {
		alias = "" // MySQL's INSERT takes no alias; its upsert needs none
	}
	return "INSERT INTO " + s.t.History + alias + " (queue, res, bucket, " + strings.Join(countCols(), ", ") + ", " + strings.Join(maxCols, ", ") + ")"
}
