package sqldialect_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// planTable creates a fresh table with the seed article's columns and the
// given index, and drops it when the test ends.
func planTable(t *testing.T, db *bun.DB, prefix, index string) string {
	t.Helper()
	name := dbtest.Name(prefix)
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS "+name,
		"CREATE TABLE "+name+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL, retry_at DATETIME NULL, payload TEXT, note VARCHAR(20), "+index+") ENGINE=InnoDB")
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// The plans of the seed article's queue query, with the seed's index and
// with one that serves it, and of other reads, on an empty table and on
// one with thousands of rows.
func TestPlanExplain(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	seed := planTable(t, db, "bq_test_plan_seed", "INDEX (status, retry_at)")
	good := planTable(t, db, "bq_test_plan_good", "INDEX (status, id)")

	tests := []struct {
		name  string
		query string // %s is the table
		table string
		want  []string // the problems, in any order
	}{
		{"seed index: filesort", "SELECT t.id FROM %s AS t WHERE (status = 'pending') ORDER BY id LIMIT 100", seed, []string{"a filesort"}},
		{"matching index", "SELECT t.id FROM %s AS t WHERE (status = 'pending') ORDER BY id LIMIT 100", good, nil},
		{"matching index and a range", "SELECT t.id FROM %s AS t WHERE (status = 'pending') AND ((retry_at IS NULL) OR (retry_at <= UTC_TIMESTAMP(6))) ORDER BY id LIMIT 100", good, nil},
		{"unindexed column in primary key order", "SELECT t.id FROM %s AS t WHERE (note = 'x') ORDER BY id LIMIT 100", good, []string{"a full index scan of t (PRIMARY)"}},
		{"unindexed column", "SELECT t.id FROM %s AS t WHERE (note = 'x') LIMIT 100", good, []string{"a full table scan of t"}},
		{"unindexed column, sorted", "SELECT t.id FROM %s AS t WHERE (note = 'x') ORDER BY retry_at LIMIT 100", good, []string{"a full table scan of t", "a filesort"}},
		{"no condition: stops at the limit", "SELECT t.id FROM %s AS t ORDER BY id LIMIT 100", good, nil},
	}
	check := func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				plan, err := sqldialect.MySQL{}.Explain(t.Context(), db, fmt.Sprintf(tt.query, tt.table))
				require.NoError(t, err)
				t.Logf("plan: %s", plan)
				require.Len(t, plan.Steps, 1)
				require.Equal(t, "t", plan.Steps[0].Table)
				require.ElementsMatch(t, tt.want, plan.Problems(), "plan: %s", plan)
			})
		}
	}
	t.Run("empty", check)
	for _, table := range []string{seed, good} {
		fill(t, db, table, 10000)
	}
	t.Run("thousands of rows", check)
}

// fill inserts n rows (n a multiple of 100) into a table made by
// planTable, one in ten of them done, and updates its statistics.
func fill(t *testing.T, db *bun.DB, table string, n int) {
	t.Helper()
	dbtest.Exec(t, db, fmt.Sprintf("INSERT INTO %s (status) "+
		"WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 99) "+
		"SELECT IF((a.n * 100 + b.n) %% 10 = 0, 'done', 'pending') FROM s a, s b WHERE b.n < %d", table, n/100),
		"ANALYZE TABLE "+table)
}

// A plan of two tables has a step for each; a query the server refuses
// is an error.
func TestPlanExplainStepsAndErrors(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	a := planTable(t, db, "bq_test_plan_steps", "INDEX (status, id)")
	b := planTable(t, db, "bq_test_plan_steps", "INDEX (note)")

	plan, err := sqldialect.MySQL{}.Explain(t.Context(), db,
		fmt.Sprintf("SELECT a.id FROM %s AS a JOIN %s AS b ON b.id = a.id WHERE a.status = 'x' AND b.payload = 'y' ORDER BY a.id LIMIT 10", a, b))
	require.NoError(t, err)
	require.Len(t, plan.Steps, 2, "plan: %s", plan)
	require.ElementsMatch(t, []string{"a", "b"}, []string{plan.Steps[0].Table, plan.Steps[1].Table})
	require.Contains(t, plan.String(), " | ")

	_, err = sqldialect.MySQL{}.Explain(t.Context(), db, "SELECT id FROM "+dbtest.Name("bq_test_plan_missing"))
	require.True(t, dbtest.IsMySQLError(err, 1146), "table doesn't exist: %v", err)
	_, err = sqldialect.MySQL{}.Explain(t.Context(), db, fmt.Sprintf("SELECT id FROM %s WHERE no_such_column = 1", a))
	require.True(t, dbtest.IsMySQLError(err, 1054), "unknown column: %v", err)
}
