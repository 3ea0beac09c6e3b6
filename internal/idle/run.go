package idle

import (
	"context"
	"database/sql"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/uptrace/bun"
)

// Run probes the idle feeds until stop is closed. It reads the flags, if
// any, with the first probe of each round, and on their own every
// Flags.Every when no feed is idle. ctx is the probes' context.
func (w *Watcher) Run(ctx context.Context, stop <-chan struct{}) {
	flags := w.cfg.Flags
	var flagsDue time.Time
	if flags != nil {
		flagsDue = time.Now().Add(backoff.Between(flags.Every()*3/4, flags.Every()))
	}
	failing := false
	for {
		wait, ok := w.next(time.Now())
		if d := max(time.Until(flagsDue), 0); flags != nil && (!ok || d < wait) {
			wait, ok = d, true
		}
		if !ok {
			wait = time.Hour // until a kick
		}
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-w.kick:
			t.Stop()
			continue
		case <-t.C:
		}
		groups := w.due(time.Now())
		if flags != nil && len(groups) == 0 && !time.Now().Before(flagsDue) {
			groups = []dueGroup{{}} // the flags alone
		}
		for i, g := range groups {
			withFlags := flags != nil && i == 0
			failing = w.probe(ctx, g.feeds, withFlags, failing)
			if g.feeds != nil {
				w.probed(g.poll, time.Now())
			}
			if withFlags {
				flagsDue = time.Now().Add(backoff.Between(flags.Every()*3/4, flags.Every()))
			}
		}
	}
}

// probe runs one statement that tells, for each of feeds, whether its
// queue has a waiting row that the feed has not handed out, and wakes the
// feeds of the queues that have; withFlags, it reads the flags too, and
// applies them. If the statement fails, it wakes the feeds all: each
// reads for itself, and reports its own error; the flags stay as they
// were. It reports whether the statement failed; failing is whether the
// last one did, which was logged.
func (w *Watcher) probe(ctx context.Context, feeds []Feed, withFlags bool, failing bool) bool {
	db := w.cfg.DB
	var cols []*bun.SelectQuery
	if withFlags {
		cols = w.cfg.Flags.Columns(db)
	}
	found := make([]sql.NullInt64, len(feeds)+len(cols))
	dest := make([]any, len(found))
	for i := range found {
		dest[i] = &found[i]
	}
	err := w.cfg.Contain(ctx, func() error {
		sel := db.NewSelect().Comment(Comment)
		for _, f := range feeds {
			sel = sel.ColumnExpr("(?)", f.Probe(db))
		}
		for _, col := range cols {
			sel = sel.ColumnExpr("(?)", col)
		}
		return sel.Scan(ctx, dest...)
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return failing
	case err != nil && !failing:
		w.cfg.Logger.WarnContext(ctx, "bunqueue: probing the idle queues failed: each reads for itself until a probe succeeds", "error", err)
	case err != nil:
		w.cfg.Logger.DebugContext(ctx, "bunqueue: probing the idle queues failed", "error", err)
	}
	if err == nil && len(cols) > 0 {
		set := make([]bool, len(cols))
		for i := range set {
			set[i] = found[len(feeds)+i].Valid
		}
		w.cfg.Flags.Apply(set)
	}
	for i, f := range feeds {
		if err != nil || found[i].Valid {
			w.Remove(f)
			f.Found()
		}
	}
	return err != nil
}
