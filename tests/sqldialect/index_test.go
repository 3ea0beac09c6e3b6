package sqldialect_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

func TestPlanSuggestIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	const jobs = "SELECT `j`.`id` FROM `bunqueue_jobs` AS `j` WHERE (queue = 'default') AND (state = 0) AND (run_at <= UTC_TIMESTAMP(6)) ORDER BY `priority`, `run_at`, `id` LIMIT 100"
	tests := []struct {
		name  string
		query string
		want  string // the columns of the index; "" when none can be derived
	}{
		{"seed", "SELECT `email`.`id` FROM `email` WHERE (status = 'pending') ORDER BY `id` LIMIT 100", "(`status`, `id`)"},
		{"jobs", jobs, "(`queue`, `state`, `priority`, `run_at`, `id`)"},
		{"a range goes after the ORDER BY, or stays out",
			"SELECT `email`.`id` FROM `email` WHERE (status = 'waiting') AND ((retry_at IS NULL) OR (retry_at <= UTC_TIMESTAMP(6))) ORDER BY `id` LIMIT 100",
			"(`status`, `id`)"},
		{"qualified with the alias or the table", "SELECT `e`.`id` FROM `email` AS `e` WHERE (`e`.status = 'x') AND (email.kind = 'y') ORDER BY `e`.`created_at` DESC LIMIT 100",
			"(`status`, `kind`, `created_at` DESC, `id`)"},
		{"nested conjunctions, reversed, IS NULL, IN one value, <=>, signed numbers",
			"SELECT id FROM email WHERE ((a = 1 AND (b IS NULL)) AND 'x' = c) AND d IN ('y') AND e <=> -5 AND f = TRUE ORDER BY id",
			"(`a`, `b`, `c`, `d`, `e`, `f`, `id`)"},
		{"not equalities", "SELECT id FROM email WHERE a > 1 AND b IN (1, 2) AND c = d AND NOT e = 1 AND (f = 1 OR g = 2) AND h = LOWER('x') AND i BETWEEN 1 AND 2 AND j IS NOT NULL AND k ORDER BY created_at",
			"(`created_at`, `id`)"},
		{"a column twice, and an ORDER BY column fixed by the WHERE", "SELECT id FROM email WHERE a = 1 AND a = 1 AND b = 2 ORDER BY b, c, id", "(`a`, `b`, `c`, `id`)"},
		{"keywords in strings and comments", "/* WHERE x = 1 ORDER BY y */ SELECT id FROM email WHERE (note = 'a ORDER BY b') AND (s = 'it''s' ) AND (u = \"q\\\" LIMIT\") ORDER BY id",
			"(`note`, `s`, `u`, `id`)"},
		{"lower-case keywords", "select id from email where status = 'x' order by id asc limit 5 for update skip locked", "(`status`, `id`)"},
		{"no ORDER BY", "SELECT id FROM email WHERE status = 'x' LIMIT 100", "(`status`, `id`)"},
		{"composite primary key", "SELECT tenant, id FROM email WHERE status = 'x' ORDER BY created_at", "(`status`, `created_at`, `tenant`, `id`)"},
		{"a joined table's equality is left out", "SELECT e.id FROM email AS e JOIN users AS u ON u.id = e.user_id WHERE u.active = 1 AND e.status = 'x' AND other = 2 ORDER BY e.id",
			"(`status`, `id`)"},

		{"only the primary key", "SELECT id FROM email ORDER BY id LIMIT 100", ""},
		{"a range only, in key order", "SELECT id FROM email WHERE retry_at <= NOW() ORDER BY id", ""},
		{"no condition, no order", "SELECT id FROM email LIMIT 100", ""},
		{"an expression in ORDER BY", "SELECT id FROM email WHERE status = 'x' ORDER BY FIELD(kind, 'a', 'b'), id", ""},
		{"a position in ORDER BY", "SELECT id FROM email WHERE status = 'x' ORDER BY 1", ""},
		{"another table's column in ORDER BY", "SELECT e.id FROM email AS e JOIN users AS u ON u.id = e.user_id WHERE e.status = 'x' ORDER BY u.rank", ""},
		{"an unqualified ORDER BY column with a join", "SELECT e.id FROM email e, users u WHERE e.status = 'x' ORDER BY created_at", ""},
		{"GROUP BY", "SELECT id FROM email WHERE status = 'x' GROUP BY id ORDER BY id", ""},
		{"UNION", "SELECT id FROM email WHERE status = 'x' UNION SELECT id FROM email WHERE status = 'y' ORDER BY id", ""},
		{"an unterminated string", "SELECT id FROM email WHERE status = 'x ORDER BY id", ""},
		{"unbalanced parentheses", "SELECT id FROM email WHERE (status = 'x' ORDER BY id", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pks := []string{"id"}
			if tt.name == "composite primary key" {
				pks = []string{"tenant", "id"}
			}
			table, alias := "email", "e"
			if tt.name == "jobs" {
				table, alias = "bunqueue_jobs", "j"
			}
			idx, ok, err := sqldialect.MySQL{}.SuggestIndex(t.Context(), db, tt.query, "", table, alias, pks)
			require.NoError(t, err)
			ddl := idx.Create
			if tt.want == "" {
				require.False(t, ok, "suggested %s", ddl)
				return
			}
			require.True(t, ok)
			require.Regexp(t, "^CREATE INDEX `"+table+"_[a-z_]+` ON `"+table+"` ", ddl)
			require.Equal(t, tt.want, ddl[len(ddl)-len(tt.want):], ddl)
		})
	}

	t.Run("schema and long names", func(t *testing.T) {
		long := "a_very_long_column_name_that_goes_on_and_on"
		idx, ok, err := sqldialect.MySQL{}.SuggestIndex(t.Context(), db, "SELECT id FROM x WHERE "+long+" = 1 ORDER BY id", "app", "x", "x", []string{"id"})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "CREATE INDEX `x_"+long+"_id` ON `app`.`x` (`"+long+"`, `id`)", idx.Create)
		idx, ok, err = sqldialect.MySQL{}.SuggestIndex(t.Context(), db, "SELECT id FROM x WHERE "+long+" = 1 AND b"+long+" = 2 ORDER BY id", "", "x", "x", []string{"id"})
		require.NoError(t, err)
		require.True(t, ok)
		name, _, _ := strings.Cut(strings.TrimPrefix(idx.Create, "CREATE INDEX `"), "`")
		require.Len(t, name, 64, "the name is cut to MySQL's limit: %s", idx.Create)
	})
}

// The index SuggestIndex derives from a query that sorts or scans serves
// it: created, it leaves nothing to warn about.
func TestPlanSuggestIndexServesTheQuery(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	for _, where := range []string{
		"status = 'pending'",
		"note = 'x'",
		"status = 'pending' AND note = 'x' AND (retry_at IS NULL OR retry_at <= UTC_TIMESTAMP(6))",
	} {
		t.Run(where, func(t *testing.T) {
			table := planTable(t, db, "bq_test_plan_suggest", "INDEX (status, retry_at)")
			fill(t, db, table, 2000)
			query := fmt.Sprintf("SELECT `t`.`id` FROM `%s` AS `t` WHERE %s ORDER BY `t`.`id` LIMIT 100", table, where)
			before, err := sqldialect.MySQL{}.Explain(t.Context(), db, query)
			require.NoError(t, err)
			require.NotEmpty(t, before.Problems(), "plan: %s", before)

			idx, ok, err := sqldialect.MySQL{}.SuggestIndex(t.Context(), db, query, "", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			require.Empty(t, idx.Existing, "the seed's index does not serve it")
			t.Log(idx.Create)
			dbtest.Exec(t, db, idx.Create, "ANALYZE TABLE "+table)
			after, err := sqldialect.MySQL{}.Explain(t.Context(), db, query)
			require.NoError(t, err)
			require.Empty(t, after.Problems(), "plan with %s: %s", idx.Create, after)

			idx, ok, err = sqldialect.MySQL{}.SuggestIndex(t.Context(), db, query, "", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			require.NotEmpty(t, idx.Existing, "the index it made serves it")
		})
	}
}

// An existing index serves a query when its columns, then the primary
// key's, start with the equality columns in any order, then the ORDER
// BY's.
func TestPlanSuggestIndexFindsAServingIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	const where = "status = 'pending' AND note = 'x' AND retry_at <= UTC_TIMESTAMP(6)"
	tests := []struct {
		index  string
		where  string
		order  string
		serves bool
	}{
		{"INDEX (status, retry_at)", "status = 'pending'", "id", false},
		{"INDEX (status)", "status = 'pending'", "id", true},
		{"INDEX (status, id)", "status = 'pending'", "id", true},
		{"INDEX (status, id)", "status = 'pending'", "id DESC", true},
		{"INDEX (retry_at, status)", "status = 'pending'", "id", false},
		{"INDEX (note, status, retry_at)", where, "retry_at", true},
		{"INDEX (status, note)", where, "retry_at", false},
		{"INDEX (status, note, retry_at)", where, "retry_at, id", true},
		{"INDEX (status, note, retry_at, payload(10))", where, "retry_at", true},
		{"INDEX (status, note, retry_at, payload(10))", where, "retry_at, id", false},
		{"INDEX (status, note, retry_at)", where, "retry_at, payload", false},
	}
	for _, tt := range tests {
		t.Run(tt.index+" "+tt.where+" ORDER BY "+tt.order, func(t *testing.T) {
			t.Parallel()
			table := planTable(t, db, "bq_test_plan_serving", tt.index)
			query := fmt.Sprintf("SELECT `t`.`id` FROM `%s` AS `t` WHERE %s ORDER BY %s LIMIT 100", table, tt.where, tt.order)
			idx, ok, err := sqldialect.MySQL{}.SuggestIndex(t.Context(), db, query, "", table, "t", []string{"id"})
			require.NoError(t, err)
			require.True(t, ok)
			if tt.serves {
				require.NotEmpty(t, idx.Existing)
			} else {
				require.Empty(t, idx.Existing)
			}
		})
	}
}
