package bunqueue

import (
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Now returns the SQL of the database clock's time in UTC for the server
// db (a *bun.DB, bun.Tx or bun.Conn) talks to, for queue queries and
// OnError writes that compare or store times: UTC_TIMESTAMP(6) on MySQL
// and MariaDB (whatever the session's time_zone), statement_timestamp()
// on PostgreSQL, the time to the millisecond on SQLite. Use it as a query
// argument:
//
//	q.Where("retry_at IS NULL OR retry_at <= ?", bunqueue.Now(db))
//
// The database clock, not the app's: app servers' clocks drift apart.
// Now panics if db's dialect is not one bunqueue supports.
func Now(db bun.IDB) bun.Safe {
	return bun.Safe(dialectOf(db).Now())
}

// NowPlus is Now plus d (which may be negative), as SQL.
func NowPlus(db bun.IDB, d time.Duration) bun.Safe {
	return bun.Safe(dialectOf(db).NowPlus(d))
}

func dialectOf(db bun.IDB) sqldialect.Dialect {
	d, err := sqldialect.For(db)
	if err != nil {
		panic(fmt.Sprintf("bunqueue: %v", err))
	}
	return d
}
