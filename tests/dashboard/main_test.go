package dashboard_test

import (
	"database/sql"
	"os"
	"testing"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The tests share the table of their table queue: drop it at the end.
	if db, err := sql.Open("mysql", dbtest.DSN()); err == nil {
		_, _ = db.Exec("DROP TABLE IF EXISTS bq_test_dashboard")
		_ = db.Close()
	}
	os.Exit(code)
}
