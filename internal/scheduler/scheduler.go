// Package scheduler runs a client's periodic jobs: one goroutine that
// reads the schedules' records and the database clock in one statement,
// enqueues the ticks that are due, and sleeps until the soonest next
// tick. It computes ticks with internal/periodic, and reads and writes
// the records, and enqueues the jobs, through a Store.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/periodic"
)

const (
	// batch is the most ticks one transaction enqueues for a schedule; a
	// longer catch-up takes several, one after the other.
	batch = 1000
	// lookMax bounds a scheduler's sleep, so that it follows a record
	// changed by another process, or a database clock set anew, within
	// that time even when its next tick is far.
	lookMax = time.Minute
	// retryMax bounds the wait after failed looks, which doubles from a
	// second.
	retryMax = 30 * time.Second
)

// Job is one schedule a Scheduler keeps.
type Job struct {
	Name       string
	Sched      periodic.Schedule
	CatchUp    time.Duration // how far back missed ticks are enqueued
	RunOnStart bool          // a new schedule's first tick is now
}

// Store keeps the schedules' records and enqueues their jobs.
type Store interface {
	// State returns the database clock (microseconds since the Unix
	// epoch) and the records of the schedules named names that exist.
	State(ctx context.Context, names []string) (now int64, recs map[string]jobsql.PeriodicRecord, err error)
	// Add records the schedule name, described by spec, with its first
	// tick; added is false if another process recorded it first.
	Add(ctx context.Context, name, spec string, first int64) (added bool, err error)
	// Advance moves the record of Jobs[job] from rec.Next to next, with
	// last as its latest enqueued tick, and enqueues the jobs of ticks,
	// in one transaction; moved is false, and nothing enqueued, if
	// another process moved the record first.
	Advance(ctx context.Context, job int, rec periodic.Record, next, last int64, ticks []int64) (moved bool, err error)
}

// Scheduler enqueues the due ticks of Jobs.
type Scheduler struct {
	Jobs   []Job
	Store  Store
	Advise func(error) error // adds the server's advice to an error
	Logger *slog.Logger
}

// Run runs the scheduler until ctx ends or stopping closes.
func (s *Scheduler) Run(ctx context.Context, stopping <-chan struct{}) {
	names := make([]string, len(s.Jobs))
	for i, j := range s.Jobs {
		names[i] = j.Name
	}
	failures := 0
	for {
		wait, err := s.look(ctx, names)
		switch {
		case ctx.Err() != nil: // Stop gave up waiting
			return
		case err != nil:
			failures++
			wait = min(wait, backoff.Jitter(backoff.Exponential(failures, time.Second, retryMax), 0.2))
			s.Logger.WarnContext(ctx, "bunqueue: periodic jobs: "+err.Error(), "retry_in", wait.Round(time.Millisecond))
		default:
			failures = 0
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-stopping:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// look reads the records and the clock, records the schedules that have
// none, enqueues the ticks that are due, and returns how long to wait
// before the soonest next tick. A schedule that failed is left out of
// that wait, and its error returned.
func (s *Scheduler) look(ctx context.Context, names []string) (time.Duration, error) {
	read := time.Now()
	now, recs, err := s.Store.State(ctx, names)
	if err != nil {
		return lookMax, fmt.Errorf("read the schedules: %w", s.Advise(err))
	}
	soonest := int64(periodic.Never)
	var errs []error
	for i := range s.Jobs {
		next, err := s.keep(ctx, i, recs, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", s.Jobs[i].Name, s.Advise(err)))
			continue
		}
		soonest = min(soonest, next)
	}
	wait := lookMax
	if soonest-now < lookMax.Microseconds() {
		// On the process's clock from the read of the database's; a
		// millisecond late, so that the tick is due when we look again.
		wait = time.Duration(soonest-now)*time.Microsecond - time.Since(read) + time.Millisecond
	}
	return wait, errors.Join(errs...)
}

// keep records Jobs[i] if it has no record, moves a changed schedule's
// next tick to the new schedule's if that is sooner, and enqueues the
// job's due ticks. It returns the job's next tick, or now to look again
// at once when another process moved the record in between.
func (s *Scheduler) keep(ctx context.Context, i int, recs map[string]jobsql.PeriodicRecord, now int64) (int64, error) {
	p := &s.Jobs[i]
	rec, ok := recs[p.Name]
	spec := p.Sched.String()
	switch {
	case !ok:
		first := p.Sched.Next(now)
		if p.RunOnStart {
			first = now
		}
		added, err := s.Store.Add(ctx, p.Name, spec, first)
		if err != nil || !added {
			return now, err // another process added it: read it
		}
		rec = jobsql.PeriodicRecord{Record: periodic.Record{Next: first, Last: periodic.NoTick}, Schedule: spec}
	case rec.Schedule != spec:
		if first := p.Sched.Next(now); first < rec.Next {
			moved, err := s.Store.Advance(ctx, i, rec.Record, first, rec.Last, nil)
			if err != nil || !moved {
				return now, err
			}
			rec.Next = first
		}
	}
	if rec.Next > now {
		return rec.Next, nil
	}
	ticks, next := periodic.Due(p.Sched, rec.Record, now, p.CatchUp, p.RunOnStart, batch)
	last := rec.Last
	if len(ticks) > 0 {
		last = ticks[len(ticks)-1]
	}
	moved, err := s.Store.Advance(ctx, i, rec.Record, next, last, ticks)
	if err != nil || !moved || next <= now { // more to enqueue, or read again
		return now, err
	}
	return next, nil
}
