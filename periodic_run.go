package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/periodic"
)

// The scheduler of a client's periodic jobs: one goroutine that reads the
// schedules' records and the database clock in one statement, enqueues
// the ticks that are due, and sleeps until the soonest next tick.

const (
	// periodicBatch is the most ticks one transaction enqueues for a
	// schedule; a longer catch-up takes several, one after the other.
	periodicBatch = 1000
	// periodicLookMax bounds a scheduler's sleep, so that it follows a
	// record changed by another process, or a database clock set anew,
	// within that time even when its next tick is far.
	periodicLookMax = time.Minute
	// periodicRetryMax bounds the wait after failed looks, which doubles
	// from a second.
	periodicRetryMax = 30 * time.Second
)

// errTickTaken rolls back the transaction of a schedule whose record
// another process moved first.
var errTickTaken = errors.New("another process handled the ticks")

// schedule runs the scheduler until the client stops.
func (c *Client) schedule(ctx context.Context) {
	defer c.workers.Done()
	names := make([]string, len(c.periodic))
	for i, p := range c.periodic {
		names[i] = p.name
	}
	failures := 0
	for {
		wait, err := c.lookAtSchedules(ctx, names)
		switch {
		case ctx.Err() != nil: // Stop gave up waiting
			return
		case err != nil:
			failures++
			wait = min(wait, backoff.Jitter(backoff.Exponential(failures, time.Second, periodicRetryMax), 0.2))
			c.cfg.Logger.WarnContext(ctx, "bunqueue: periodic jobs: "+unprefixed(err), "retry_in", wait.Round(time.Millisecond))
		default:
			failures = 0
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// lookAtSchedules reads the records and the clock, records the schedules
// that have none, enqueues the ticks that are due, and returns how long
// to wait before the soonest next tick. A schedule that failed is left
// out of that wait, and its error returned.
func (c *Client) lookAtSchedules(ctx context.Context, names []string) (time.Duration, error) {
	read := time.Now()
	now, recs, err := c.jobSQL().PeriodicState(ctx, c.db, names)
	if err != nil {
		return periodicLookMax, fmt.Errorf("read the schedules: %w", c.dialect.Advise(err))
	}
	soonest := int64(periodic.Never)
	var errs []error
	for _, p := range c.periodic {
		next, err := c.keepSchedule(ctx, p, recs, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", p.name, c.dialect.Advise(err)))
			continue
		}
		soonest = min(soonest, next)
	}
	wait := periodicLookMax
	if soonest-now < periodicLookMax.Microseconds() {
		// On the process's clock from the read of the database's; a
		// millisecond late, so that the tick is due when we look again.
		wait = time.Duration(soonest-now)*time.Microsecond - time.Since(read) + time.Millisecond
	}
	return wait, errors.Join(errs...)
}

// keepSchedule records p if it has no record, moves a changed schedule's
// next tick to the new schedule's if that is sooner, and enqueues p's
// due ticks. It returns p's next tick, or now to look again at once when
// another process moved the record in between.
func (c *Client) keepSchedule(ctx context.Context, p *periodicJob, recs map[string]jobsql.PeriodicRecord, now int64) (int64, error) {
	rec, ok := recs[p.name]
	spec := p.sched.String()
	switch {
	case !ok:
		first := p.sched.Next(now)
		if p.runOnStart {
			first = now
		}
		added, err := c.jobSQL().AddPeriodic(ctx, c.db, p.name, spec, first)
		if err != nil || !added {
			return now, err // another process added it: read it
		}
		rec = jobsql.PeriodicRecord{Record: periodic.Record{Next: first, Last: periodic.NoTick}, Schedule: spec}
	case rec.Schedule != spec:
		if first := p.sched.Next(now); first < rec.Next {
			moved, err := c.advance(ctx, p, rec.Record, first, rec.Last, nil)
			if err != nil || !moved {
				return now, err
			}
			rec.Next = first
		}
	}
	if rec.Next > now {
		return rec.Next, nil
	}
	ticks, next := periodic.Due(p.sched, rec.Record, now, p.catchUp, p.runOnStart, periodicBatch)
	last := rec.Last
	if len(ticks) > 0 {
		last = ticks[len(ticks)-1]
	}
	moved, err := c.advance(ctx, p, rec.Record, next, last, ticks)
	if err != nil || !moved || next <= now { // more to enqueue, or read again
		return now, err
	}
	return next, nil
}

// advance moves p's record from rec.Next to next, with last as its latest
// enqueued tick, and enqueues the jobs of ticks, in one transaction,
// retried after a deadlock; moved is false, and nothing enqueued, if
// another process moved the record first.
func (c *Client) advance(ctx context.Context, p *periodicJob, rec periodic.Record, next, last int64, ticks []int64) (moved bool, err error) {
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
