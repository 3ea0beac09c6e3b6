package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bunqueue/bunqueue"
)

// failedJob is a failed job as the failed commands print it in JSON.
type failedJob struct {
	ID    int64  `json:"id"`
	JobID int64  `json:"job_id"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Args is the payload when it is JSON (as bunqueue enqueues it);
	// otherwise ArgsBase64 holds its bytes.
	Args        json.RawMessage `json:"args,omitempty"`
	ArgsBase64  []byte          `json:"args_base64,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Priority    int             `json:"priority"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	UniqueKey   *string         `json:"unique_key"`
	Error       string          `json:"error"`
	CreatedAt   time.Time       `json:"created_at"`
	FailedAt    time.Time       `json:"failed_at"`
}

func toFailedJob(f *bunqueue.FailedJob) failedJob {
	out := failedJob{ID: f.ID, JobID: f.JobID, Queue: f.Queue, Kind: f.Kind, Priority: f.Priority,
		Attempts: f.Attempts, MaxAttempts: f.MaxAttempts, UniqueKey: f.UniqueKey, Error: f.Error,
		CreatedAt: f.CreatedAt.UTC(), FailedAt: f.FailedAt.UTC()}
	if json.Valid(f.Args) {
		out.Args = f.Args
	} else {
		out.ArgsBase64 = f.Args
	}
	if len(f.Metadata) > 0 && json.Valid(f.Metadata) {
		out.Metadata = f.Metadata
	}
	return out
}

// failedList is what failed list --json prints.
type failedList struct {
	FailedJobs []failedJob `json:"failed_jobs"`
	// NextBeforeID is the --before of the next page, or null after the
	// last page.
	NextBeforeID *int64 `json:"next_before_id"`
}

// actionResult is one id's result of failed retry or delete, in JSON.
type actionResult struct {
	ID int64 `json:"id"`
	// OK: the job was put back (NewJobID is its id in bunqueue_jobs) or
	// deleted.
	OK       bool   `json:"ok"`
	NewJobID int64  `json:"new_job_id,omitempty"`
	Queue    string `json:"queue,omitempty"`
	NotFound bool   `json:"not_found,omitempty"`
	Error    string `json:"error,omitempty"`
}

func failedUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: bunqueue failed <list|show|retry|delete> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  list    list failed jobs, newest first: --queue, --kind, --before ID, --limit N")
	fmt.Fprintln(w, "  show    print failed jobs in full, with payload and error: show ID...")
	fmt.Fprintln(w, "  retry   put failed jobs back in their queue, to run now with fresh attempts: retry ID...")
	fmt.Fprintln(w, "  delete  delete failed jobs for good: delete ID...")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each takes --dsn and --json. An id that is not a failed job's makes the command")
	fmt.Fprintf(w, "exit with %d, after it has dealt with the others.\n", exitNotFound)
}

func runFailed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		failedUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		failedUsage(stdout)
		return exitOK
	case "list":
		return runFailedList(ctx, args[1:], stdout, stderr)
	case "show", "retry", "delete":
		return runFailedIDs(ctx, args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bunqueue failed: unknown subcommand %q\n\n", args[0])
	failedUsage(stderr)
	return exitUsage
}

// failedClient opens the database and a client over it that knows the
// jobs queues named (RetryFailed puts a job back only into a queue its
// client knows).
func failedClient(ctx context.Context, dbf dbFlags, stderr io.Writer, queues ...string) (*database, *bunqueue.Client, error) {
	d, err := connect(ctx, dbf)
	if err != nil {
		return nil, nil, err
	}
	cfg := &bunqueue.Config{Tables: d.tables, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if len(queues) > 0 {
		cfg.JobQueues = map[string]bunqueue.JobQueueConfig{}
		for _, q := range queues {
			cfg.JobQueues[q] = bunqueue.JobQueueConfig{}
		}
	}
	c, err := bunqueue.NewClient(d.db, cfg)
	if err != nil {
		d.close()
		return nil, nil, err
	}
	return d, c, nil
}

func runFailedList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("failed list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the failed jobs, with payloads and errors, as JSON")
	queue := fs.String("queue", "", "only failed jobs of this queue")
	kind := fs.String("kind", "", "only failed jobs of this kind")
	before := fs.Int64("before", 0, "only failed jobs whose id is below this one: the next page after a page that ended with it")
	limit := fs.Int("limit", 20, "the most failed jobs listed, 1 to 1000")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue failed list [--dsn DSN] [--prefix P] [--schema S] [--json] [--queue NAME] [--kind KIND] [--before ID] [--limit N]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists failed jobs, newest first: id, queue, kind, attempts, when, and the first")
		fmt.Fprintln(stderr, "line of the error. `bunqueue failed show ID` prints one in full.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *limit < 1 || *limit > 1000 || *before < 0 {
		fmt.Fprintln(stderr, "failed list: --limit must be within 1..1000 and --before must not be negative")
		return exitUsage
	}
	d, c, err := failedClient(ctx, dbf, stderr)
	if err != nil {
		return fail(stderr, "failed list", err)
	}
	defer d.close()
	jobs, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: *queue, Kind: *kind, BeforeID: *before, Limit: *limit})
	if err != nil {
		return fail(stderr, "failed list", d.explain(err))
	}
	var next *int64
	if len(jobs) == *limit {
		id := jobs[len(jobs)-1].ID
		next = &id
	}
	if *asJSON {
		out := failedList{FailedJobs: make([]failedJob, len(jobs)), NextBeforeID: next}
		for i := range jobs {
			out.FailedJobs[i] = toFailedJob(&jobs[i])
		}
		if err := writeJSON(stdout, out); err != nil {
			return fail(stderr, "failed list", err)
		}
		return exitOK
	}
	if len(jobs) == 0 {
		fmt.Fprintln(stdout, "no failed jobs")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tATTEMPTS\tFAILED AT (UTC)\tERROR")
	for _, f := range jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", f.ID, printable(f.Queue, false), printable(f.Kind, false),
			f.Attempts, f.MaxAttempts, f.FailedAt.UTC().Format("2006-01-02 15:04:05"), errorLine(f.Error, 80))
	}
	_ = tw.Flush()
	if next != nil {
		fmt.Fprintf(stdout, "\nmore may follow: add --before %d for the next page\n", *next)
	}
	return exitOK
}

// errorLine returns the first line of s, at most n runes of it, safe to
// print.
func errorLine(s string, n int) string {
	s, _, more := strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		s, more = string(r[:n]), true
	}
	s = printable(s, false)
	if more {
		s += " …"
	}
	return s
}

// findFailed returns the failed job id, or nil if there is none.
func findFailed(ctx context.Context, c *bunqueue.Client, id int64) (*bunqueue.FailedJob, error) {
	jobs, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{BeforeID: id + 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 || jobs[0].ID != id {
		return nil, nil
	}
	return &jobs[0], nil
}

func runFailedIDs(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	name := "failed " + action
	what := map[string]string{
		"show":   "Prints each failed job in full: its payload as it was enqueued (control characters\nescaped), its metadata, attempts, times and the whole error (with the stack, for a\npanic). With --json the payload is JSON, or args_base64 if it is not JSON.",
		"retry":  "Puts each failed job back in its queue, to run now with fresh attempts, and\nremoves it from the failed jobs (Client.RetryFailed). A job whose UniqueKey is\nheld by a pending job is not duplicated: that job's id is printed.",
		"delete": "Deletes each failed job for good (Client.DeleteFailed).",
	}[action]
	cmd, code := parseIDsCommand(name, what, "failed job", "failed list", args, stderr)
	if code >= 0 {
		return code
	}
	ids, asJSON := cmd.ids, &cmd.asJSON
	d, c, err := failedClient(ctx, cmd.db, stderr)
	if err != nil {
		return fail(stderr, name, err)
	}
	defer d.close()

	results := make([]actionResult, 0, len(ids))
	var shown []failedJob
	code = exitOK
	for _, id := range ids {
		r := actionResult{ID: id}
		var err error
		switch action {
		case "show":
			var f *bunqueue.FailedJob
			if f, err = findFailed(ctx, c, id); err == nil && f != nil {
				r.OK, r.Queue = true, f.Queue
				shown = append(shown, toFailedJob(f))
				if !*asJSON {
					printFailed(stdout, f, len(shown) > 1)
				}
			} else if err == nil {
				err = bunqueue.ErrFailedJobNotFound
			}
		case "retry":
			r.NewJobID, r.Queue, err = retryFailed(ctx, d, c, stderr, id)
			r.OK = err == nil
		case "delete":
			err = c.DeleteFailed(ctx, id)
			r.OK = err == nil
		}
		switch {
		case errors.Is(err, bunqueue.ErrFailedJobNotFound):
			r.NotFound, r.Error = true, fmt.Sprintf("no failed job with id %d", id)
			fmt.Fprintf(stderr, "bunqueue %s: no failed job with id %d\n", name, id)
			if code == exitOK {
				code = exitNotFound
			}
		case err != nil:
			err = d.explain(err)
			r.Error = err.Error()
			fmt.Fprintf(stderr, "bunqueue %s: %d: %v\n", name, id, err)
			code = exitError
		case action == "retry" && !*asJSON:
			fmt.Fprintf(stdout, "failed job %d is back in queue %q as job %d\n", id, printable(r.Queue, false), r.NewJobID)
		case action == "delete" && !*asJSON:
			fmt.Fprintf(stdout, "deleted failed job %d\n", id)
		}
		results = append(results, r)
	}
	if *asJSON {
		var v any = results
		if action == "show" {
			if shown == nil {
				shown = []failedJob{}
			}
			v = shown
		}
		if err := writeJSON(stdout, v); err != nil {
			return fail(stderr, name, err)
		}
	}
	return code
}

// retryFailed puts failed job id back in its queue. RetryFailed needs a
// client that knows the queue: the tool knows no app's configuration, so
// it makes one for the job's queue.
func retryFailed(ctx context.Context, d *database, c *bunqueue.Client, stderr io.Writer, id int64) (int64, string, error) {
	f, err := findFailed(ctx, c, id)
	switch {
	case err != nil:
		return 0, "", err
	case f == nil:
		return 0, "", bunqueue.ErrFailedJobNotFound
	}
	cfg := &bunqueue.Config{
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		JobQueues: map[string]bunqueue.JobQueueConfig{f.Queue: {}},
	}
	qc, err := bunqueue.NewClient(d.db, cfg)
	if err != nil {
		return 0, "", err
	}
	newID, err := qc.RetryFailed(ctx, id)
	return newID, f.Queue, err
}

// printFailed prints one failed job in full, safe for a terminal.
func printFailed(w io.Writer, f *bunqueue.FailedJob, separate bool) {
	if separate {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "id:\t%d\n", f.ID)
	fmt.Fprintf(tw, "job id:\t%d\n", f.JobID)
	fmt.Fprintf(tw, "queue:\t%s\n", printable(f.Queue, false))
	fmt.Fprintf(tw, "kind:\t%s\n", printable(f.Kind, false))
	fmt.Fprintf(tw, "attempts:\t%d of %d\n", f.Attempts, f.MaxAttempts)
	fmt.Fprintf(tw, "priority:\t%d\n", f.Priority)
	if f.UniqueKey != nil {
		fmt.Fprintf(tw, "unique key:\t%s\n", printable(*f.UniqueKey, false))
	}
	fmt.Fprintf(tw, "created at:\t%s UTC\n", f.CreatedAt.UTC().Format("2006-01-02 15:04:05.000000"))
	fmt.Fprintf(tw, "failed at:\t%s UTC\n", f.FailedAt.UTC().Format("2006-01-02 15:04:05.000000"))
	_ = tw.Flush()
	if len(f.Metadata) > 0 {
		fmt.Fprintf(w, "metadata: %s\n", printable(string(f.Metadata), false))
	}
	fmt.Fprintf(w, "args (%d bytes):\n%s\n", len(f.Args), indent(printable(string(f.Args), true)))
	fmt.Fprintf(w, "error:\n%s\n", indent(printable(f.Error, true)))
}

// indent indents each line of s by two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
