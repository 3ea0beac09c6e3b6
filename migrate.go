package bunqueue

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// Migrate creates or upgrades the jobs tables (bunqueue_jobs,
// bunqueue_failed_jobs) and records the schema version in
// bunqueue_migrations. It is idempotent and safe to run from several
// processes at once: they take turns on a named server lock, and each
// version is applied once. Only the jobs table needs it; queues over the
// app's own tables do not.
func Migrate(ctx context.Context, db *bun.DB) error {
	if _, err := migrate.Run(ctx, db); err != nil {
		return fmt.Errorf("bunqueue: migrate: %w", err)
	}
	return nil
}

// MigrationSQL returns the SQL that Migrate runs, as one script, for
// users who apply migrations with their own tool. Running it twice is
// harmless.
func MigrationSQL() string { return migrate.SQL() }
