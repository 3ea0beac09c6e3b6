package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/pgxlisten"
)

// Goal of issue 19 for enqueue → start across processes with
// notifications, on PostgreSQL at 300 enqueues a second.
const (
	notifyGoalP50 = 5 * time.Millisecond
	notifyGoalP99 = 20 * time.Millisecond
)

// noNotifications is the skip of the scenarios that need LISTEN/NOTIFY:
// only PostgreSQL has it.
func noNotifications(b *bench) string {
	if _, pg := b.sql.(postgresBench); pg {
		return ""
	}
	return "the server has no notifications (LISTEN/NOTIFY is PostgreSQL's): workers find other processes' jobs by polling, as in latency-xproc"
}

// latencyCrossProcess is the latency scenario with the enqueues made by a
// child process (one autocommit Enqueue each, through its *bun.DB, which
// notifies on PostgreSQL). Without listen no wake-up hook can reach this
// process's workers, which find the jobs by polling (PollInterval left at
// its default); with listen this process's client has a
// pgxlisten.Listener, and the child's notifications wake its feed. On
// PostgreSQL it vacuums the jobs table first.
func (b *bench) latencyCrossProcess(ctx context.Context, perSecond int, listen bool) (result, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	queue := "bench_latency_xproc"
	var base bunqueue.Config
	var clock *wakeClock
	if listen {
		queue += "_notify"
		l, err := pgxlisten.New(b.dsn)
		if err != nil {
			return result{}, err
		}
		clock = &wakeClock{next: l, kind: "jobs", queue: queue}
		base.Listener = clock
	}
	client, cleanup, err := b.jobsClientConfig(ctx, db, queue, bunqueue.JobQueueConfig{Workers: workers}, base)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	// PostgreSQL: the dead row versions that the scenarios before left in
	// the jobs table (autovacuum may be off) would weigh on the feed's
	// reads and the claims.
	vacuum := b.sql.vacuum(jobsTable)
	if err := execAll(ctx, db, vacuum...); err != nil {
		return result{}, err
	}
	rec := startRecorder{runs: b.newTally()}
	if clock != nil {
		rec.sinceWake = clock.sinceLast
	}
	if err := bunqueue.AddWorker(client, rec.worker()); err != nil {
		return result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	stopClient := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return client.Stop(stopCtx)
	}
	poll := bunqueue.PollIntervalDefault
	rep, err := b.runProducer(ctx, "enqueue", perSecond, "--queue", queue)
	if err == nil {
		b.scene.addChild(rep)
		// Give the last jobs a poll interval and 2 s to start.
		rec.waitStarted(rep.Enqueued, poll+2*time.Second)
	}
	rss := readRSS()
	if serr := stopClient(); err == nil && serr != nil {
		err = fmt.Errorf("stop the client: %w", serr)
	}
	if err != nil {
		return result{}, err
	}
	if rep.InWindow < 2 || rep.EnqueueP50ms == nil {
		return result{}, errors.New("the child enqueued fewer than 2 jobs during the measured window")
	}
	lat := rec.measured()
	note := fmt.Sprintf("a child process enqueued %d in the window (%.0f/s, the Enqueue call took p50 %.2f ms, p99 %.2f ms), %d started here",
		rep.InWindow, float64(rep.InWindow)/rep.WindowS, *rep.EnqueueP50ms, *rep.EnqueueP99ms, len(lat))
	if len(vacuum) > 0 {
		note += "; " + vacuum[0] + " before it"
	}
	r, err := latencyResult(lat, rep.InWindow, time.Duration(rep.WindowS*float64(time.Second)), rss, note)
	if err != nil {
		return result{}, err
	}
	fromReturn := rec.sinceReturn(rep.Returned)
	if p50, p99 := percentile(fromReturn, 0.5), percentile(fromReturn, 0.99); p50 != nil {
		r.Note += fmt.Sprintf("; from the return of Enqueue (its commit done) p50 %.2f ms, p99 %.2f ms", *p50, *p99)
	}
	if listen {
		r.Note += notifyNote(r, clock, rec.measuredSinceWake())
		r.Note += pathNote(rec.jobTimes(), rep.Returned, rep.Notifies, clock.arrivals())
		return r, nil
	}
	goal := poll + 20*time.Millisecond
	verdict := "met"
	if r.P99ms == nil || *r.P99ms > ms(goal) {
		verdict = "NOT met"
	}
	r.Note += fmt.Sprintf("; PollInterval %s (the default): goal p99 ≤ PollInterval + 20 ms = %s: %s", poll, goal, verdict)
	return r, nil
}

// notifyNote is the end of latency-xproc-notify's note: the notifications
// received, how long after the last one each measured job started, and
// the goal.
func notifyNote(r result, clock *wakeClock, sinceWake []time.Duration) string {
	note := fmt.Sprintf("; %d notifications received for the queue (%d for others on the channel)", clock.count.Load(), clock.others.Load())
	if p50, p99 := percentile(sinceWake, 0.5), percentile(sinceWake, 0.99); p50 != nil {
		note += fmt.Sprintf(", each job started p50 %.2f ms, p99 %.2f ms after the last one", *p50, *p99)
	}
	verdict := "met"
	if r.P50ms == nil || r.P99ms == nil || *r.P50ms > ms(notifyGoalP50) || *r.P99ms > ms(notifyGoalP99) {
		verdict = "NOT met"
	}
	return fmt.Sprintf("%s; goal p50 ≤ %s, p99 ≤ %s (issue 19): %s", note, notifyGoalP50, notifyGoalP99, verdict)
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
