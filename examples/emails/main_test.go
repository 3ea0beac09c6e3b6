package main

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	"github.com/bunqueue/bunqueue/examples/internal/exampledb"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The example runs the same on an SQLite file, MariaDB and PostgreSQL:
// every email ends sent, or failed after maxAttempts, none waiting.
func TestRun(t *testing.T) {
	servers := map[string]func(t *testing.T) *bun.DB{
		"sqlite": func(t *testing.T) *bun.DB {
			sqldb, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "emails.db")+"?"+exampledb.SQLiteOptions)
			require.NoError(t, err)
			db := bun.NewDB(sqldb, sqlitedialect.New())
			t.Cleanup(func() { _ = db.Close() })
			return db
		},
		"mysql":    func(t *testing.T) *bun.DB { return dbtest.Open(t, 16) },
		"postgres": func(t *testing.T) *bun.DB { return dbtest.OpenPG(t, 16) },
	}
	for name, open := range servers {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS example_email") })
			require.NoError(t, run(t.Context(), db))
			var emails []Email
			require.NoError(t, db.NewSelect().Model(&emails).Scan(t.Context()))
			require.Len(t, emails, numEmails)
			for _, e := range emails {
				switch e.Status {
				case "sent":
					require.NotNil(t, e.SentAt, "email %d", e.ID)
					require.Less(t, e.Attempts, maxAttempts, "email %d", e.ID)
				case "failed":
					require.Equal(t, maxAttempts, e.Attempts, "email %d", e.ID)
				default:
					t.Fatalf("email %d is %q", e.ID, e.Status)
				}
			}
		})
	}
}
