package bunqueue

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/periodic"
	"github.com/bunqueue/bunqueue/internal/scheduler"
)

// errTickTaken rolls back the transaction of a schedule whose record
// another process moved first.
var errTickTaken = errors.New("another process handled the ticks")

// schedule runs the scheduler of the client's periodic jobs (see
// internal/scheduler) until the client stops.
func (c *Client) schedule(ctx context.Context) {
	defer c.workers.Done()
	jobs := make([]scheduler.Job, len(c.periodic))
	for i, p := range c.periodic {
		jobs[i] = scheduler.Job{Name: p.name, Sched: p.sched, CatchUp: p.catchUp, RunOnStart: p.runOnStart}
	}
	s := &scheduler.Scheduler{Jobs: jobs, Store: periodicStore{c}, Advise: c.dialect.Advise, Logger: c.cfg.Logger}
	s.Run(ctx, c.stopping)
}

// periodicStore is the scheduler's Store: the client's periodic table,
// and its jobs' queues.
type periodicStore struct{ c *Client }

// State implements scheduler.Store.
func (s periodicStore) State(ctx context.Context, names []string) (int64, map[string]jobsql.PeriodicRecord, error) {
	return s.c.jobSQL().PeriodicState(ctx, s.c.db, names)
}

// Add implements scheduler.Store.
func (s periodicStore) Add(ctx context.Context, name, spec string, first int64) (bool, error) {
	return s.c.jobSQL().AddPeriodic(ctx, s.c.db, name, spec, first)
}

// Advance implements scheduler.Store, retried after a deadlock.
func (s periodicStore) Advance(ctx context.Context, job int, rec periodic.Record, next, last int64, ticks []int64) (moved bool, err error) {
	c, p := s.c, s.c.periodic[job]
	err = c.retry(ctx, func() error {
		return c.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			ok, err := c.jobSQL().AdvancePeriodic(ctx, tx, p.name, rec.Next, next, last, p.sched.String())
			switch {
			case err != nil:
				return err
			case !ok:
				return errTickTaken
			case len(ticks) == 0:
				return nil
			}
			_, err = c.EnqueueMany(ctx, tx, p.params(ticks))
			return err
		})
	})
	switch {
	case errors.Is(err, errTickTaken):
		return false, nil
	case err != nil:
		return false, err
	}
	if len(ticks) > 0 {
		c.cfg.Logger.DebugContext(ctx, "bunqueue: periodic job enqueued", "periodic_job", p.name, "ticks", len(ticks),
			"last_tick", time.UnixMicro(last).UTC())
	}
	return true, nil
}
