package histsql

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// UpkeepLease is the name of the lease row whose holder does the
// history's upkeep.
const UpkeepLease = "history"

// Claim takes or renews the lease name for holder until ttl from now on
// the database clock, if it is free (expired) or holder's, and reports
// whether holder has it. The row is added at its first claim.
func (s SQL) Claim(ctx context.Context, db bun.IDB, name, holder string, ttl time.Duration) (bool, error) {
	r, err := db.NewRaw("UPDATE "+s.t.Leases+" SET holder = ?, expires_at = "+s.d.NowPlus(ttl)+
		" WHERE name = ? AND (holder = ? OR expires_at < "+s.d.Now()+")", holder, name, holder).Exec(ctx)
	if err != nil {
		return false, err
	}
	if n, err := r.RowsAffected(); err != nil || n > 0 {
		return n > 0, err
	}
	skip := " ON CONFLICT (name) DO NOTHING"
	if s.mysql() {
		skip = " ON DUPLICATE KEY UPDATE name = name" // no change: no row affected
	}
	r, err = db.NewRaw("INSERT INTO "+s.t.Leases+" (name, holder, expires_at) VALUES (?, ?, "+s.d.NowPlus(ttl)+")"+skip, name, holder).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// Release ends holder's lease name now, so that another process may take
// it at once.
func (s SQL) Release(ctx context.Context, db bun.IDB, name, holder string) error {
	_, err := db.NewRaw("UPDATE "+s.t.Leases+" SET expires_at = "+s.d.NowPlus(-time.Millisecond)+
		" WHERE name = ? AND holder = ?", name, holder).Exec(ctx)
	return err
}
