package jobsql

import (
	"context"
	"errors"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/periodic"
)

// PeriodicRecord is a schedule's row of the periodic table.
type PeriodicRecord struct {
	periodic.Record
	// Schedule describes the schedule that set Next.
	Schedule string
}

// periodicRow is what PeriodicState reads: the database clock, with each
// record of the names asked for; one row with the clock alone if none has
// a record.
type periodicRow struct {
	Now      int64   `bun:"clock_us"`
	Name     *string `bun:"name"`
	Schedule string  `bun:"schedule"`
	Next     int64   `bun:"next_tick"`
	Last     *int64  `bun:"last_tick"`
}

// PeriodicState returns the database clock (microseconds since the Unix
// epoch) and the records of the schedules named names that exist, by
// name, read in one statement.
func (s SQL) PeriodicState(ctx context.Context, db bun.IDB, names []string) (int64, map[string]PeriodicRecord, error) {
	var rows []periodicRow
	err := scan(ctx, db, &rows, "SELECT c.clock_us, p.name, p.schedule, p.next_tick, p.last_tick FROM (SELECT "+s.d.NowMicros()+" AS clock_us) c"+
		" LEFT JOIN "+s.t.Periodic+" p ON p.name IN (?)", bun.List(names))
	switch {
	case err != nil:
		return 0, nil, err
	case len(rows) == 0: // the LEFT JOIN keeps the clock's row
		return 0, nil, errors.New("the read of the clock and the periodic records returned no row")
	}
	recs := make(map[string]PeriodicRecord, len(rows))
	for _, r := range rows {
		if r.Name == nil {
			continue
		}
		rec := PeriodicRecord{Record: periodic.Record{Next: r.Next, Last: periodic.NoTick}, Schedule: r.Schedule}
		if r.Last != nil {
			rec.Last = *r.Last
		}
		recs[*r.Name] = rec
	}
	return rows[0].Now, recs, nil
}

// AddPeriodic records the schedule named name, whose first tick is next,
// unless it has a record; added is false if it had one.
func (s SQL) AddPeriodic(ctx context.Context, db bun.IDB, name, schedule string, next int64) (added bool, err error) {
	r, err := db.NewRaw("INSERT INTO "+s.t.Periodic+" (name, schedule, next_tick, updated_at) VALUES (?, ?, ?, "+s.d.Now()+")"+s.d.SkipTakenKeys(),
		name, schedule, next).Exec(ctx)
	if s.d.KeyTaken(err, "PRIMARY") {
		return false, nil
	}
	return affected(r, err)
}

// AdvancePeriodic moves the record of the schedule named name from the
// next tick from to to, with last as its latest enqueued tick
// (periodic.NoTick for none) and schedule as its description, if its next
// tick is still from: the compare-and-set that lets one transaction only
// handle the ticks before to. The row stays locked until tx ends, and a
// transaction that waited for it finds it moved: moved is false.
func (s SQL) AdvancePeriodic(ctx context.Context, tx bun.IDB, name string, from, to, last int64, schedule string) (moved bool, err error) {
	var lastTick *int64
	if last != periodic.NoTick {
		lastTick = &last
	}
	return affected(tx.NewRaw("UPDATE "+s.t.Periodic+" SET next_tick = ?, last_tick = ?, schedule = ?, updated_at = "+s.d.Now()+
		" WHERE name = ? AND next_tick = ?", to, lastTick, schedule, name, from).Exec(ctx))
}
