package main

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/examples/internal/exampledb"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// servers open the databases the tests run on: an SQLite file, MariaDB
// and PostgreSQL.
var servers = map[string]func(t *testing.T) *bun.DB{
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

// The example runs the same on an SQLite file, MariaDB and PostgreSQL:
// every email ends sent, or failed after maxAttempts, none waiting.
func TestRun(t *testing.T) {
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

// One email through the queue's handler, and OnError if the fake sender
// fails, in the test's goroutine with Queue.ProcessNext and the client
// not started (for a job of the jobs table, bunqueuetest.WorkJob does
// the same): it is sent, or its failure is recorded for a retry.
func TestOneEmail(t *testing.T) {
	for name, open := range servers {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			ctx := t.Context()
			t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS example_email") })
			require.NoError(t, createTable(ctx, db))
			e := Email{Recipient: "ada@example.com", Status: "waiting"}
			_, err := db.NewInsert().Model(&e).Exec(ctx)
			require.NoError(t, err)
			client, err := bunqueue.NewClient(db, nil)
			require.NoError(t, err)
			q := emailQueue(db)
			require.NoError(t, client.Add(q))

			claimed, err := q.ProcessNext(ctx)
			require.True(t, claimed)
			require.NoError(t, db.NewSelect().Model(&e).WherePK().Scan(ctx))
			var ie *bunqueue.ItemError
			switch {
			case err == nil:
				require.Equal(t, "sent", e.Status)
				require.NotNil(t, e.SentAt)
				require.Zero(t, e.Attempts)
			case errors.As(err, &ie) && ie.Recorded:
				require.Equal(t, "waiting", e.Status)
				require.Equal(t, 1, e.Attempts)
				require.NotNil(t, e.RetryAt)
			default:
				t.Fatalf("ProcessNext: %v", err)
			}
		})
	}
}
