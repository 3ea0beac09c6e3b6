package dashboard_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// dashTable is the table of the tests' table queue, which they share:
// TestMain creates it before them (concurrent CREATE TABLE IF NOT EXISTS
// can fail on PostgreSQL) and drops it after.
const dashTable = "bq_test_dashboard"

func TestMain(m *testing.M) {
	db, err := dbtest.OpenDB()
	if err == nil {
		for _, stmt := range dbtest.DDL(dbtest.ServerName(), "CREATE TABLE IF NOT EXISTS "+dashTable+
			" (id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE, INDEX (done, id)) ENGINE=InnoDB") {
			if _, err = db.Exec(stmt); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests/dashboard: creating", dashTable+":", err)
		os.Exit(1)
	}
	code := m.Run()
	_, _ = db.Exec("DROP TABLE IF EXISTS " + dashTable)
	_ = db.Close()
	os.Exit(code)
}
