package bunqueue

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// Migrate creates or upgrades bunqueue's tables with their default names
// (see Tables; Tables.Migrate for others): the jobs, the failed jobs, the
// paused queues, the periodic jobs' ticks, the limits' slots, and the
// schema versions applied. It is idempotent and safe to run from several
// processes at once: they take turns on a named server lock, and each
// version is applied once. Jobs, periodic jobs, PauseQueue and the limits
// need it; queues over the app's own tables run without it.
func Migrate(ctx context.Context, db *bun.DB) error { return Tables{}.Migrate(ctx, db) }

// runMigrate applies the missing migrations of the tables n.
func runMigrate(ctx context.Context, db *bun.DB, n tables.Names) error {
	if _, err := migrate.Run(ctx, db, n); err != nil {
		if d, derr := sqldialect.For(db); derr == nil {
			err = d.Advise(err) // a driver that met a pooler: say what to do
		}
		return fmt.Errorf("bunqueue: migrate: %w", err)
	}
	return nil
}

// MigrationSQL returns the SQL that Migrate runs on MySQL and MariaDB,
// as one script, for users who apply migrations with their own tool
// (`bunqueue migrate --sql` with a postgres:// DSN prints PostgreSQL's;
// Tables.MigrationSQL gives other names): each version's statements, then
// the INSERT that records it. Running it twice is harmless but for one
// case: version 2 makes "key" and "key " two unique keys, and while two
// pending jobs hold such keys, running its first ALTER TABLE again fails
// and changes nothing. Apply each version once, as Migrate does, and that
// cannot happen.
func MigrationSQL() string { return Tables{}.MigrationSQL() }
