// Package queuesql holds the statements on the queues table, which keeps
// the pause flag of each queue for every process on the database: a
// queue is paused while its row's paused_at is set.
//
// The table's name comes from tables.Names; the clock and the upsert's
// shape of each server come from sqldialect.
// Nothing else writes SQL on this table.
package queuesql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// SQL is the statements on the queues table of one kind of server. Its
// methods run them through the bun.IDB they are given.
type SQL struct {
	d sqldialect.Dialect
	t tables.Names
}

// New returns the statements of d's server on the queues table of t.
func New(d sqldialect.Dialect, t tables.Names) SQL { return SQL{d: d, t: t} }

// Dialect is the server's dialect the statements are written for.
func (s SQL) Dialect() sqldialect.Dialect { return s.d }

// Table is the queues table's name.
func (s SQL) Table() string { return s.t.Queues }

// Pause marks the queue named name paused, adding its row if it has
// none; a queue paused already keeps the time of its first pause.
func (s SQL) Pause(ctx context.Context, db bun.IDB, name string) error {
	_, err := db.NewRaw(s.pauseSQL(), name).Exec(ctx)
	return err
}

// pauseSQL is the upsert that marks a queue paused, keeping the time of
// the first pause.
func (s SQL) pauseSQL() string {
	now := s.d.Now()
	values := " (name, paused_at, updated_at) VALUES (?, " + now + ", " + now + ")"
	if _, mysql := s.d.(sqldialect.MySQL); mysql {
		return "INSERT INTO " + s.t.Queues + values + " ON DUPLICATE KEY UPDATE paused_at = COALESCE(paused_at, " + now + "), updated_at = " + now
	}
	return "INSERT INTO " + s.t.Queues + " AS q" + values +
		" ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(q.paused_at, excluded.paused_at), updated_at = excluded.updated_at"
}

// Resume clears the pause of the queue named name; a queue that is not
// paused is left as it is.
func (s SQL) Resume(ctx context.Context, db bun.IDB, name string) error {
	_, err := db.NewRaw("UPDATE "+s.t.Queues+" SET paused_at = NULL, updated_at = "+s.d.Now()+" WHERE name = ?", name).Exec(ctx)
	return err
}

// Paused returns the names of the paused queues, sorted.
func (s SQL) Paused(ctx context.Context, db bun.IDB) ([]string, error) {
	var names []string
	err := db.NewRaw("SELECT name FROM "+s.t.Queues+" WHERE paused_at IS NOT NULL ORDER BY name").Scan(ctx, &names)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return names, nil
}

// PausedColumn returns a scalar subquery that tells whether the queue
// named name is paused: 1 if it is, NULL if not. The idle watcher reads
// the flags of its queues with it, in the statement that probes the
// idle queues.
func (s SQL) PausedColumn(db bun.IDB, name string) *bun.SelectQuery {
	return db.NewSelect().TableExpr(s.t.Queues).ColumnExpr("1").
		Where("name = ?", name).Where("paused_at IS NOT NULL")
}
