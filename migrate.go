package bunqueue

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// Migrate creates or upgrades the jobs tables (bunqueue_jobs,
// bunqueue_failed_jobs), the paused queues' (bunqueue_queues) and the
// periodic jobs' records (bunqueue_periodic), and records the schema
// version in bunqueue_migrations. It is idempotent and safe to run from
// several processes at once: they take turns on a named server lock, and
// each version is applied once. Jobs, periodic jobs and PauseQueue need
// it; queues over the app's own tables run without it.
func Migrate(ctx context.Context, db *bun.DB) error {
	if _, err := migrate.Run(ctx, db); err != nil {
		if d, derr := sqldialect.For(db); derr == nil {
			err = d.Advise(err) // a driver that met a pooler: say what to do
		}
		return fmt.Errorf("bunqueue: migrate: %w", err)
	}
	return nil
}

// MigrationSQL returns the SQL that Migrate runs on MySQL and MariaDB,
// as one script, for users who apply migrations with their own tool
// (`bunqueue migrate --sql` with a postgres:// DSN prints PostgreSQL's):
// each version's statements, then the INSERT that records it. Running it
// twice is harmless but for one case: version 2 makes "key" and "key "
// two unique keys, and while two pending jobs hold such keys, running its
// first ALTER TABLE again fails and changes nothing. Apply each version
// once, as Migrate does, and that cannot happen.
func MigrationSQL() string { return migrate.SQL() }
