package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// queueResult is what queue pause|resume --json prints.
type queueResult struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

func queueUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: bunqueue queue <list|pause|resume> [--dsn DSN] [--prefix P] [--schema S] [--json] [NAME]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  list    list the paused queues")
	fmt.Fprintln(w, "  pause   pause the queue NAME in every process: within a poll interval no client")
	fmt.Fprintln(w, "          starts another of its rows or jobs; those in flight finish")
	fmt.Fprintln(w, "  resume  resume it: the clients that run it hand its rows out again")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NAME is a table queue's or a jobs queue's name. The flag is kept in the")
	fmt.Fprintln(w, "queues table (bunqueue_queues, or that of --prefix and --schema; bunqueue migrate")
	fmt.Fprintln(w, "creates it). Each takes --dsn (a MySQL or MariaDB DSN, or a")
	fmt.Fprintln(w, "postgres:// URL for PostgreSQL), --prefix, --schema and --json.")
}

func runQueue(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		queueUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		queueUsage(stdout)
		return exitOK
	case "list":
		return runQueueList(ctx, args[1:], stdout, stderr)
	case "pause", "resume":
		return runQueueSet(ctx, args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bunqueue queue: unknown subcommand %q\n\n", args[0])
	queueUsage(stderr)
	return exitUsage
}

func runQueueSet(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	name := "queue " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the queue and its state as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bunqueue %s [--dsn DSN] [--prefix P] [--schema S] [--json] NAME\n\n", name)
		fs.PrintDefaults()
	}
	rest, code := parseWithArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintf(stderr, "%s: give one queue name, got %d arguments\n", name, len(rest))
		fs.Usage()
		return exitUsage
	}
	queue := rest[0]
	d, c, err := failedClient(ctx, dbf, stderr)
	if err != nil {
		return fail(stderr, name, err)
	}
	defer d.close()
	paused := sub == "pause"
	if paused {
		err = c.PauseQueue(ctx, queue)
	} else {
		err = c.ResumeQueue(ctx, queue)
	}
	if err != nil {
		return fail(stderr, name, d.explain(err))
	}
	if *asJSON {
		if err := writeJSON(stdout, queueResult{Queue: queue, Paused: paused}); err != nil {
			return fail(stderr, name, err)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "queue %s %sd\n", printable(queue, false), sub)
	return exitOK
}

func runQueueList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("queue list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the paused queues as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue queue list [--dsn DSN] [--prefix P] [--schema S] [--json]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists the paused queues (a queue that is not listed runs).")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	d, c, err := failedClient(ctx, dbf, stderr)
	if err != nil {
		return fail(stderr, "queue list", err)
	}
	defer d.close()
	names, err := c.PausedQueues(ctx)
	if err != nil {
		return fail(stderr, "queue list", d.explain(err))
	}
	if *asJSON {
		out := make([]queueResult, len(names))
		for i, n := range names {
			out[i] = queueResult{Queue: n, Paused: true}
		}
		if err := writeJSON(stdout, map[string][]queueResult{"paused": out}); err != nil {
			return fail(stderr, "queue list", err)
		}
		return exitOK
	}
	if len(names) == 0 {
		fmt.Fprintln(stdout, "no paused queues")
		return exitOK
	}
	for _, n := range names {
		fmt.Fprintf(stdout, "%s\tpaused\n", printable(n, false))
	}
	return exitOK
}
