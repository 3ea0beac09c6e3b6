// Package procsql holds the statements on the processes table, the
// registry of the clients that run queues: each started client keeps one
// row, refreshed by its heartbeat and deleted at Stop; a row whose
// heartbeat stopped is stale after StaleBeats of its intervals, and any
// process's heartbeat deletes it ForgetAfter later.
//
// Times are set and compared on the database clock, so that the clocks
// of the app servers never meet.
package procsql

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// StaleBeats is how many heartbeat intervals a process may miss before
// the others take it for stopped.
const StaleBeats = 3

// ForgetAfter is how long a stale process's row stays, shown as stale,
// before a heartbeat deletes it.
const ForgetAfter = time.Hour

// Row is one process's row.
type Row struct {
	ID          string
	Name        string
	Host        string
	PID         int64
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time
	// Queues is the JSON of the process's queues, as it last wrote them.
	Queues string
	// Stale is read, not written: whether stale_at has passed.
	Stale bool `bun:"stale,scanonly"`
}

// SQL is the statements on the processes table of one kind of server.
type SQL struct {
	d sqldialect.Dialect
	t tables.Names
}

// New returns the statements of d's server on the processes table of t.
func New(d sqldialect.Dialect, t tables.Names) SQL { return SQL{d: d, t: t} }

// Table is the processes table's name.
func (s SQL) Table() string { return s.t.Processes }

// times is the SET list of a heartbeat's times, for a process that beats
// every interval.
func (s SQL) times(every time.Duration) string {
	stale := StaleBeats * every
	return "heartbeat_at = " + s.d.Now() + ", stale_at = " + s.d.NowPlus(stale) + ", forget_at = " + s.d.NowPlus(stale+ForgetAfter)
}

// Insert adds r's row, its start and first heartbeat now.
func (s SQL) Insert(ctx context.Context, db bun.IDB, r Row, every time.Duration) error {
	stale := StaleBeats * every
	_, err := db.NewRaw("INSERT INTO "+s.t.Processes+" (id, name, host, pid, version, started_at, heartbeat_at, stale_at, forget_at, queues) VALUES (?, ?, ?, ?, ?, "+
		s.d.Now()+", "+s.d.Now()+", "+s.d.NowPlus(stale)+", "+s.d.NowPlus(stale+ForgetAfter)+", ?)",
		r.ID, r.Name, r.Host, r.PID, r.Version, r.Queues).Exec(ctx)
	return err
}

// Beat refreshes the heartbeat and the queues of the process id, and
// reports whether its row was there.
func (s SQL) Beat(ctx context.Context, db bun.IDB, id, queues string, every time.Duration) (bool, error) {
	r, err := db.NewRaw("UPDATE "+s.t.Processes+" SET "+s.times(every)+", queues = ? WHERE id = ?", queues, id).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// Delete deletes the row of the process id.
func (s SQL) Delete(ctx context.Context, db bun.IDB, id string) error {
	_, err := db.NewRaw("DELETE FROM "+s.t.Processes+" WHERE id = ?", id).Exec(ctx)
	return err
}

// Forget deletes the rows whose forget_at has passed.
func (s SQL) Forget(ctx context.Context, db bun.IDB) error {
	_, err := db.NewRaw("DELETE FROM " + s.t.Processes + " WHERE forget_at < " + s.d.Now()).Exec(ctx)
	return err
}

// List reads every row into dest, by name and start.
func (s SQL) List(ctx context.Context, db bun.IDB, dest *[]Row) error {
	return db.NewRaw("SELECT id, name, host, pid, version, started_at, heartbeat_at, queues, CASE WHEN stale_at < "+s.d.Now()+
		" THEN 1 ELSE 0 END AS stale FROM "+s.t.Processes+" ORDER BY name, started_at, id").Scan(ctx, dest)
}
