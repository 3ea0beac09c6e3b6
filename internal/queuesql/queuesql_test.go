package queuesql

import (
	"strings"
	"testing"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// A pause keeps the time of the first: MySQL's upsert and the others'
// both leave a set paused_at as it is.
func TestPauseKeepsTheFirstPause(t *testing.T) {
	for _, tc := range []struct {
		d    sqldialect.Dialect
		want string
	}{
		{sqldialect.MySQL{}, " ON DUPLICATE KEY UPDATE paused_at = COALESCE(paused_at, "},
		{sqldialect.Postgres{}, " ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(q.paused_at, excluded.paused_at)"},
		{sqldialect.SQLite{}, " ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(q.paused_at, excluded.paused_at)"},
	} {
		if got := New(tc.d, tables.Default).pauseSQL(); !strings.Contains(got, tc.want) {
			t.Errorf("%T: %s\nwant it to contain %s", tc.d, got, tc.want)
		}
	}
}
