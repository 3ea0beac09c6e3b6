package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bunqueue/bunqueue"
)

// runProcesses lists the process registry: every started client of the
// tables, live ones first, stale ones marked.
func runProcesses(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("processes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the processes, with their queues, as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue processes [--dsn DSN] [--prefix P] [--schema S] [--json]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists the processes that run queues on the database (Client.Processes): each")
		fmt.Fprintln(stderr, "started client, its host, pid, version, start, last heartbeat, and its queues")
		fmt.Fprintln(stderr, "with their workers, rows in flight and pause as it saw them. A process that")
		fmt.Fprintf(stderr, "missed %d heartbeats is marked stale; it is listed for %s more.\n", bunqueue.ProcessStaleBeats, bunqueue.ProcessForgetAfter)
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	d, c, err := failedClient(ctx, dbf, stderr)
	if err != nil {
		return fail(stderr, "processes", err)
	}
	defer d.close()
	ps, err := c.Processes(ctx)
	if err != nil {
		return fail(stderr, "processes", d.explain(err))
	}
	if *asJSON {
		for i := range ps {
			ps[i].This = false // the tool's own client does not run
		}
		if err := writeJSON(stdout, map[string][]bunqueue.Process{"processes": ps}); err != nil {
			return fail(stderr, "processes", err)
		}
		return exitOK
	}
	printProcesses(stdout, ps, time.Now())
	return exitOK
}

// printProcesses prints ps as a table: a line per process, then a line
// per queue of it.
func printProcesses(w io.Writer, ps []bunqueue.Process, now time.Time) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "no processes (none started, or the database's bunqueue is older than the registry)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tHOST\tPID\tVERSION\tSTARTED\tHEARTBEAT\tSTATE")
	live := 0
	for _, p := range ps {
		state := "live"
		if p.Stale {
			state = "STALE"
		} else {
			live++
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s ago\t%s\n", printable(p.Name, false), printable(p.Host, false), p.PID,
			printable(p.Version, false), p.StartedAt.Format(time.RFC3339), now.Sub(p.HeartbeatAt).Round(time.Millisecond), state)
		for _, q := range p.Queues {
			fmt.Fprintf(tw, "  %s\t%s, %s\t%d workers\t%d in flight\t%s\t\t\n", printable(q.Name, false), q.Kind, q.Mode, q.Workers, q.InFlight, queueFlags(q))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d live, %d stale\n", live, len(ps)-live)
}

// queueFlags says a queue's pause and limits, for the table.
func queueFlags(q bunqueue.ProcessQueue) string {
	var out []string
	if q.Paused {
		out = append(out, "paused")
	}
	if q.GlobalLimit > 0 {
		out = append(out, fmt.Sprintf("global limit %d", q.GlobalLimit))
	}
	if q.KeyLimit > 0 {
		out = append(out, fmt.Sprintf("key limit %d", q.KeyLimit))
	}
	if q.RateLimit.N > 0 {
		out = append(out, fmt.Sprintf("rate %d/%s", q.RateLimit.N, q.RateLimit.Per))
	}
	if q.KeyRate.N > 0 {
		out = append(out, fmt.Sprintf("key rate %d/%s", q.KeyRate.N, q.KeyRate.Per))
	}
	return strings.Join(out, ", ")
}
