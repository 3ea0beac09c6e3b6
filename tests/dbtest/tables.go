package dbtest

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// DropTables drops, when the test ends, the tables of tables (a test's
// own prefix) with its startup probe, or on PostgreSQL its schema with
// everything in it.
func DropTables(t testing.TB, db *bun.DB, tables bunqueue.Tables) {
	t.Cleanup(func() {
		ctx := context.Background()
		if tables.Schema != "" {
			if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+tables.Schema+" CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", tables.Schema, err)
			}
			return
		}
		for _, name := range append(tables.Names(), tables.Prefix+"probe") {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
				t.Errorf("drop table %s: %v", name, err)
			}
		}
	})
}
