package jobsql

import (
	"context"

	"github.com/uptrace/bun"
)

// CheckColumns fails, through db, if the jobs tables lack a column that
// the statements here name: the jobs table's of schema version 7, which
// the claims read, both tables' of version 8, which a failed attempt
// writes, and version 9's flow column and dependencies table. It reads
// no row: one statement per table.
func (s SQL) CheckColumns(ctx context.Context, db bun.IDB) error {
	for _, probe := range []string{
		"SELECT " + LimitKeyColumn + ", " + AttemptErrorsColumn + ", " + FlowColumn + " FROM " + s.t.Jobs + " WHERE 1 = 0",
		"SELECT job_id FROM " + s.t.JobDeps + " WHERE 1 = 0",
		"SELECT " + AttemptErrorsColumn + " FROM " + s.t.FailedJobs + " WHERE 1 = 0",
	} {
		if _, err := db.ExecContext(ctx, probe); err != nil {
			return err
		}
	}
	return nil
}
