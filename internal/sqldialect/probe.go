package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// skipLockedProbe is what differs between servers in probeSkipLocked.
type skipLockedProbe struct {
	table  string // id INT primary key, rows 1 and 2 in it
	server string // the server's name and version, for the errors
	needs  string // what bunqueue needs, for the errors
	read   string // the first unlocked row of table, skipping locked ones
	// prepare, if set, runs in the second transaction before read.
	prepare string
	// unknown reports a syntax error: the server has no SKIP LOCKED.
	unknown func(err error) bool
	// waited, if set, reports the server's own lock wait timeout.
	waited func(err error) bool
}

// probeSkipLocked locks row 1 of p.table on one connection and asks a
// second for the first unlocked row: it must get row 2 at once, neither
// wait for row 1, nor return it, nor skip row 2.
func probeSkipLocked(ctx context.Context, db *bun.DB, p skipLockedProbe) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	failed := func(err error) error {
		if pctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("bunqueue: startup probe: no connection or no lock on %s within %s (is the connection pool busy, or another session holding the probe row?): %w", p.table, probeTimeout, err)
		}
		return fmt.Errorf("bunqueue: startup probe: %w", err)
	}
	holder, err := db.BeginTx(pctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return failed(err)
	}
	defer func() { _ = holder.Rollback() }()
	var id int
	if err := holder.QueryRowContext(pctx, "SELECT id FROM "+p.table+" WHERE id = 1 FOR UPDATE").Scan(&id); err != nil {
		return failed(err)
	}
	other, err := db.BeginTx(pctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return failed(err)
	}
	defer func() { _ = other.Rollback() }() // before holder's: a concurrent probe's holder then finds row 2 free
	if p.prepare != "" {
		if _, err := other.ExecContext(pctx, p.prepare); err != nil {
			return failed(err)
		}
	}
	// The server's own bound, if prepare set one, comes first.
	wctx, wcancel := context.WithTimeout(pctx, probeWait+time.Second)
	defer wcancel()
	err = other.QueryRowContext(wctx, p.read).Scan(&id)
	switch {
	case p.unknown(err):
		return fmt.Errorf("bunqueue: server %s does not understand SKIP LOCKED; %s: %w", p.server, p.needs, err)
	case p.waited != nil && p.waited(err), wctx.Err() != nil && pctx.Err() == nil:
		return fmt.Errorf("bunqueue: server %s waited for a locked row instead of skipping it; %s", p.server, p.needs)
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("bunqueue: server %s skipped unlocked rows in the startup probe; %s", p.server, p.needs)
	case err != nil:
		return failed(err)
	case id != 2:
		return fmt.Errorf("bunqueue: server %s returned a row another transaction had locked: it ignores SKIP LOCKED; %s", p.server, p.needs)
	}
	return nil
}
