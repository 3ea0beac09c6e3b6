package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// kindStats counts the jobs of one kind in one queue.
type kindStats struct {
	Kind string `json:"kind"`
	// Waiting jobs are due now: their run_at has passed. They include the
	// jobs running in lock mode (a read that locks nothing cannot tell
	// them apart).
	Waiting int `json:"waiting"`
	// Scheduled jobs wait for a later run_at: enqueued with a delay,
	// waiting for their next attempt, or leased (lease mode).
	Scheduled int `json:"scheduled"`
	// Failed jobs are in bunqueue_failed_jobs.
	Failed int `json:"failed"`
}

// queueStats counts the jobs of one queue of the jobs table.
type queueStats struct {
	Queue     string `json:"queue"`
	Waiting   int    `json:"waiting"`
	Scheduled int    `json:"scheduled"`
	Failed    int    `json:"failed"`
	// Capped: some count reached the limit, so the counts are lower
	// bounds.
	Capped bool `json:"capped"`
	// OldestWaitingSeconds is how long the longest-waiting due job has
	// been due, or null when none is.
	OldestWaitingSeconds *float64    `json:"oldest_waiting_seconds"`
	Kinds                []kindStats `json:"kinds"`

	jobsCapped, failedCapped bool // which counts are lower bounds
}

// statsReport is what stats --json prints.
type statsReport struct {
	Database string       `json:"database"`
	Limit    int          `json:"limit"`
	Queues   []queueStats `json:"queues"`
	// FleetLastHour is what every process completed and failed over the
	// last hour, by queue, from the fleet's history (any queue a started
	// client ran, its own tables' too); null without the history table.
	FleetLastHour []fleetQueue `json:"fleet_last_hour"`
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	queue := fs.String("queue", "", "show only this queue")
	limit := fs.Int("limit", bunqueue.QueueDepthLimit, "count at most this many waiting and scheduled jobs per queue, and failed jobs per queue and kind,\nso that it stays cheap on a large table (a count that reaches it is shown as N+)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue stats [--dsn DSN] [--prefix P] [--schema S] [--json] [--queue NAME] [--limit N]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Counts the jobs of the jobs table per queue and per kind: waiting (due now,")
		fmt.Fprintln(stderr, "running lock-mode jobs included), scheduled (due later: delayed, backing off")
		fmt.Fprintln(stderr, "or leased) and failed, and how long the longest-waiting due job has been due.")
		fmt.Fprintln(stderr, "It reads without locking anything. Queues over the app's own tables are not")
		fmt.Fprintln(stderr, "known to the tool: see the dashboard or Queue.Count. Then, from the fleet's")
		fmt.Fprintln(stderr, "history (schema version 12), what every process that runs queues completed")
		fmt.Fprintln(stderr, "and failed over the last hour, per queue, those over the app's tables too.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *limit <= 0 {
		fmt.Fprintln(stderr, "stats: --limit must be positive")
		return exitUsage
	}
	d, err := connect(ctx, dbf)
	if err != nil {
		return fail(stderr, "stats", err)
	}
	defer d.close()
	rep, err := collectStats(ctx, d, *queue, *limit)
	if err != nil {
		return fail(stderr, "stats", d.explain(err))
	}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return fail(stderr, "stats", err)
		}
		return exitOK
	}
	printStats(stdout, rep)
	return exitOK
}

// collectStats counts the jobs of every queue (or of the one named),
// each count capped at limit, with reads that an index serves.
func collectStats(ctx context.Context, d *database, only string, limit int) (*statsReport, error) {
	db, jobs := d.db, jobsql.New(d.dialect, d.names)
	byQueue := map[string]*queueStats{}
	kindOf := func(q *queueStats, kind string) *kindStats {
		for i := range q.Kinds {
			if q.Kinds[i].Kind == kind {
				return &q.Kinds[i]
			}
		}
		q.Kinds = append(q.Kinds, kindStats{Kind: kind})
		return &q.Kinds[len(q.Kinds)-1]
	}
	queueOf := func(name string) *queueStats {
		if byQueue[name] == nil {
			byQueue[name] = &queueStats{Queue: name, Kinds: []kindStats{}}
		}
		return byQueue[name]
	}

	queues, err := jobs.Queues(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list the queues: %w", err)
	}
	failedKinds, err := jobs.FailedKinds(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list the failed jobs' queues: %w", err)
	}
	for _, name := range queues {
		if only == "" || name == only {
			queueOf(name)
		}
	}
	for _, fk := range failedKinds {
		if only != "" && fk.Queue != only {
			continue
		}
		q := queueOf(fk.Queue)
		n, err := jobs.CountFailed(ctx, db, fk.Queue, fk.Kind, limit)
		if err != nil {
			return nil, fmt.Errorf("count the failed jobs of queue %q: %w", fk.Queue, err)
		}
		kindOf(q, fk.Kind).Failed = n
		q.Failed += n
		q.failedCapped = q.failedCapped || n >= limit
		q.Capped = q.Capped || n >= limit
	}
	if only != "" && byQueue[only] == nil {
		queueOf(only) // an empty queue: all zeros
	}

	for _, q := range byQueue {
		kinds, err := jobs.CountWaiting(ctx, db, q.Queue, limit)
		if err != nil {
			return nil, fmt.Errorf("count the jobs of queue %q: %w", q.Queue, err)
		}
		total := 0
		for _, k := range kinds {
			ks := kindOf(q, k.Kind)
			ks.Waiting, ks.Scheduled = k.Due, k.Total-k.Due
			q.Waiting += k.Due
			q.Scheduled += k.Total - k.Due
			total += k.Total
		}
		q.jobsCapped = total >= limit
		q.Capped = q.Capped || total >= limit
		age, err := oldestWaiting(ctx, jobs, db, q.Queue)
		if err != nil {
			return nil, err
		}
		q.OldestWaitingSeconds = age
		slices.SortFunc(q.Kinds, func(a, b kindStats) int {
			if a.Kind < b.Kind {
				return -1
			}
			if a.Kind > b.Kind {
				return 1
			}
			return 0
		})
	}
	fleet, err := fleetLastHour(ctx, d, only)
	if err != nil {
		return nil, err
	}
	rep := &statsReport{Database: d.where, Limit: limit, Queues: []queueStats{}, FleetLastHour: fleet}
	for _, q := range byQueue {
		rep.Queues = append(rep.Queues, *q)
	}
	slices.SortFunc(rep.Queues, func(a, b queueStats) int {
		if a.Queue < b.Queue {
			return -1
		}
		if a.Queue > b.Queue {
			return 1
		}
		return 0
	})
	return rep, nil
}

// oldestWaiting returns how long, in seconds, the longest-waiting due job
// of queue has been due, or nil if none is. It reads the smallest run_at
// of each priority, each an index dive into the claim index.
func oldestWaiting(ctx context.Context, jobs jobsql.SQL, db bun.IDB, queue string) (*float64, error) {
	priorities, err := jobs.Priorities(ctx, db, queue)
	if err != nil {
		return nil, fmt.Errorf("read the priorities of queue %q: %w", queue, err)
	}
	var oldest *float64
	for _, p := range priorities {
		first, at, err := jobs.OldestDue(ctx, db, queue, p)
		if err != nil {
			return nil, fmt.Errorf("read the oldest due job of queue %q: %w", queue, err)
		}
		if !first.Valid || !at.Valid {
			continue
		}
		s := max(at.Time.Sub(first.Time).Seconds(), 0)
		if oldest == nil || s > *oldest {
			oldest = &s
		}
	}
	return oldest, nil
}

// printStats prints rep as two tables: per queue, then per queue and kind.
func printStats(w io.Writer, rep *statsReport) {
	if len(rep.Queues) == 0 {
		fmt.Fprintf(w, "no jobs in %s\n", rep.Database)
		printFleet(w, rep.FleetLastHour)
		return
	}
	count := func(n int, capped bool) string {
		if capped {
			return strconv.Itoa(n) + "+"
		}
		return strconv.Itoa(n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tWAITING\tSCHEDULED\tFAILED\tOLDEST WAITING")
	for _, q := range rep.Queues {
		age := "-"
		if q.OldestWaitingSeconds != nil {
			age = time.Duration(*q.OldestWaitingSeconds * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(q.Queue, false),
			count(q.Waiting, q.jobsCapped), count(q.Scheduled, q.jobsCapped), count(q.Failed, q.failedCapped), age)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tKIND\tWAITING\tSCHEDULED\tFAILED")
	for _, q := range rep.Queues {
		for _, k := range q.Kinds {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(q.Queue, false), printable(k.Kind, false),
				count(k.Waiting, q.jobsCapped), count(k.Scheduled, q.jobsCapped), count(k.Failed, k.Failed >= rep.Limit))
		}
	}
	_ = tw.Flush()
	if slices.ContainsFunc(rep.Queues, func(q queueStats) bool { return q.Capped }) {
		fmt.Fprintf(w, "\nN+: the count stopped at --limit %d\n", rep.Limit)
	}
	printFleet(w, rep.FleetLastHour)
}
