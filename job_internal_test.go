package bunqueue

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// The models of the jobs tables, whose tags cannot name a constant, name
// the tables jobsql's statements run on, and FailedJob has a field for
// each column that jobsql reads into it, in the table's order.
func TestJobModelsNameTheJobsTables(t *testing.T) {
	t.Parallel()
	bunTables := schema.NewTables(mysqldialect.New())
	jobs := bunTables.Get(reflect.TypeFor[jobRow]())
	require.Equal(t, tables.Default.Jobs, jobs.Name)
	failed := bunTables.Get(reflect.TypeFor[FailedJob]())
	require.Equal(t, tables.Default.FailedJobs, failed.Name)
	var cols []string
	for _, f := range failed.Fields {
		cols = append(cols, f.Name)
	}
	require.Equal(t, strings.Split(jobsql.FailedColumns, ", "), cols)
}
