package wake_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/wake"
)

// The query hook reads every statement of the app's DB: reading the
// tables a write names allocates nothing.
func TestTargetsAllocatesNothing(t *testing.T) {
	for _, q := range []string{
		"SELECT * FROM t WHERE id = 1",
		"INSERT INTO `bunqueue_jobs` (queue, kind) VALUES ('default', 'k')",
		"/* c */ UPDATE low_priority `db`.`t` AS t JOIN u ON u.id = t.id SET t.status = 'x'",
		`INSERT INTO "app"."t" VALUES (1)`,
	} {
		var buf [4]wake.Table
		allocs := testing.AllocsPerRun(100, func() { wake.Targets(q, buf[:0]) })
		require.Zero(t, allocs, q)
	}
}
