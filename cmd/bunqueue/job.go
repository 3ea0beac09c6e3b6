package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bunqueue/bunqueue"
)

// jobRecord is a job as the job commands print it in JSON.
type jobRecord struct {
	ID    int64             `json:"id"`
	Queue string            `json:"queue"`
	Kind  string            `json:"kind"`
	State bunqueue.JobState `json:"state"`
	// Args is the payload when it is JSON (as bunqueue enqueues it);
	// otherwise ArgsBase64 holds its bytes.
	Args        json.RawMessage   `json:"args,omitempty"`
	ArgsBase64  []byte            `json:"args_base64,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Priority    int               `json:"priority"`
	Attempts    int               `json:"attempts"`
	MaxAttempts int               `json:"max_attempts"`
	RunAt       *time.Time        `json:"run_at,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	CompletedAt *time.Time        `json:"completed_at,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	// Errors are the job's failed attempts, oldest first.
	Errors    []attemptRecord `json:"errors,omitempty"`
	UniqueKey *string         `json:"unique_key"`
	Output    json.RawMessage `json:"output,omitempty"`
	// FailedID is the job's id in bunqueue_failed_jobs, for `failed
	// retry`, when it failed.
	FailedID int64 `json:"failed_id,omitempty"`
}

// attemptRecord is one failed attempt of a job, as --json prints it.
type attemptRecord struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

func toJobRecord(j *bunqueue.JobRecord) jobRecord {
	out := jobRecord{ID: j.ID, Queue: j.Queue, Kind: j.Kind, State: j.State, Metadata: j.Metadata, Priority: j.Priority,
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, CreatedAt: j.CreatedAt, CompletedAt: j.CompletedAt,
		LastError: j.LastError, UniqueKey: j.UniqueKey}
	if json.Valid(j.Args) {
		out.Args = j.Args
	} else {
		out.ArgsBase64 = j.Args
	}
	if len(j.Output) > 0 && json.Valid(j.Output) {
		out.Output = j.Output
	}
	if !j.RunAt.IsZero() {
		out.RunAt = &j.RunAt
	}
	if j.Failed != nil {
		out.FailedID = j.Failed.ID
	}
	for _, e := range j.Errors {
		out.Errors = append(out.Errors, attemptRecord{Attempt: e.Attempt, At: e.At, Error: e.Error})
	}
	return out
}

// jobList is what job list --json prints.
type jobList struct {
	Jobs []jobRecord `json:"jobs"`
	// NextCursor is the --cursor of the next page, or null after the last
	// page.
	NextCursor *string `json:"next_cursor"`
	// Searched is, with --search, how many jobs the page looked through.
	Searched int `json:"searched,omitempty"`
}

// jobActionResult is one id's result of job cancel, delete or run-now,
// in JSON.
type jobActionResult struct {
	ID int64 `json:"id"`
	OK bool  `json:"ok"`
	// Was is the state job cancel found the job in.
	Was      bunqueue.JobState `json:"was,omitempty"`
	NotFound bool              `json:"not_found,omitempty"`
	Error    string            `json:"error,omitempty"`
}

func jobUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: bunqueue job <get|list|cancel|delete|run-now> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  get      print jobs in full, in any state, failed ones too: get ID...")
	fmt.Fprintln(w, "  list     list jobs, newest first: --queue, --kind, --state, --from, --before, --cursor, --limit")
	fmt.Fprintln(w, "  cancel   cancel jobs: a waiting one never runs, a running lease-mode one is cancelled at")
	fmt.Fprintln(w, "           its next heartbeat; each moves to the failed jobs: cancel ID...")
	fmt.Fprintln(w, "  delete   delete jobs for good, waiting, completed or failed: delete ID...")
	fmt.Fprintln(w, "  run-now  make scheduled or retrying jobs due now: run-now ID...")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "An ID is the job's id in the jobs table (a failed job keeps it as its job id). Each")
	fmt.Fprintln(w, "takes --dsn (a MySQL or MariaDB DSN, or a postgres:// URL for PostgreSQL) and --json.")
	fmt.Fprintf(w, "An id that is no job's makes the command exit with %d, after it has dealt with the\n", exitNotFound)
	fmt.Fprintln(w, "others; a job that runs in lock mode, or has finished, is an error (exit 1).")
}

func runJob(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		jobUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		jobUsage(stdout)
		return exitOK
	case "list":
		return runJobList(ctx, args[1:], stdout, stderr)
	case "get", "cancel", "delete", "run-now":
		return runJobIDs(ctx, args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bunqueue job: unknown subcommand %q\n\n", args[0])
	jobUsage(stderr)
	return exitUsage
}

// jobListFlags are the flags of job list.
type jobListFlags struct {
	db                                                dbFlags
	queue, kind, states, from, before, search, cursor *string
	limit                                             *int
	asJSON                                            *bool
}

func newJobListFlags(fs *flag.FlagSet) jobListFlags {
	return jobListFlags{
		db:     addDBFlags(fs),
		asJSON: fs.Bool("json", false, "print the jobs, with payloads and outputs, as JSON"),
		queue:  fs.String("queue", "", "only jobs of this queue"),
		kind:   fs.String("kind", "", "only jobs of this kind"),
		states: fs.String("state", "", "only jobs in these states, comma-separated: pending, scheduled, running, retrying, completed, failed"),
		from:   fs.String("from", "", "only jobs created at or after this time (RFC 3339)"),
		before: fs.String("before", "", "only jobs created before this time (RFC 3339)"),
		search: fs.String("search", "", "only jobs whose args or error contain this text (ASCII letters in either case); a page looks through at most 10,000 jobs"),
		cursor: fs.String("cursor", "", "the next page after the page that printed this cursor"),
		limit:  fs.Int("limit", 20, "the most jobs listed, 1 to 1000"),
	}
}

// filter returns the flags as a JobListFilter, or a usage error.
func (f jobListFlags) filter() (bunqueue.JobListFilter, error) {
	filter := bunqueue.JobListFilter{Queue: *f.queue, Kind: *f.kind, Search: *f.search, Cursor: *f.cursor, Limit: *f.limit}
	if *f.limit < 1 || *f.limit > 1000 {
		return filter, errors.New("--limit must be within 1..1000")
	}
	if *f.states != "" {
		for _, s := range strings.Split(*f.states, ",") {
			filter.States = append(filter.States, bunqueue.JobState(strings.TrimSpace(s)))
		}
	}
	for flagName, t := range map[string]*time.Time{"--from": &filter.CreatedFrom, "--before": &filter.CreatedBefore} {
		v := map[string]string{"--from": *f.from, "--before": *f.before}[flagName]
		if v == "" {
			continue
		}
		parsed, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return filter, fmt.Errorf("%s %q is not an RFC 3339 time, such as 2026-01-02T15:04:05Z", flagName, v)
		}
		*t = parsed
	}
	return filter, nil
}

func runJobList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("job list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := newJobListFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: bunqueue job list [--dsn DSN] [--prefix P] [--schema S] [--json] [--queue NAME] [--kind KIND] [--state S,...]")
		fmt.Fprintln(stderr, "                         [--from TIME] [--before TIME] [--search TEXT] [--cursor C] [--limit N]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists jobs, newest first, from the jobs table and the failed jobs: id, queue, kind,")
		fmt.Fprintln(stderr, "state, attempts, when created, and the first line of the last error.")
		fmt.Fprintln(stderr, "`bunqueue job get ID` prints one in full.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	filter, err := flags.filter()
	if err != nil {
		fmt.Fprintf(stderr, "job list: %v\n", err)
		return exitUsage
	}
	d, c, err := failedClient(ctx, flags.db, stderr)
	if err != nil {
		return fail(stderr, "job list", err)
	}
	defer d.close()
	page, err := c.JobList(ctx, filter)
	if errors.Is(err, bunqueue.ErrInvalidFilter) {
		fmt.Fprintf(stderr, "job list: %v\n", err)
		return exitUsage
	}
	if err != nil {
		return fail(stderr, "job list", d.explain(err))
	}
	return printJobList(stdout, stderr, page, *flags.asJSON)
}

func printJobList(stdout, stderr io.Writer, page bunqueue.JobListPage, asJSON bool) int {
	var next *string
	if page.Cursor != "" {
		next = &page.Cursor
	}
	if asJSON {
		out := jobList{Jobs: make([]jobRecord, len(page.Jobs)), NextCursor: next, Searched: page.Searched}
		for i := range page.Jobs {
			out.Jobs[i] = toJobRecord(&page.Jobs[i])
		}
		if err := writeJSON(stdout, out); err != nil {
			return fail(stderr, "job list", err)
		}
		return exitOK
	}
	if len(page.Jobs) == 0 && next == nil {
		fmt.Fprintln(stdout, "no jobs")
		return exitOK
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintf(stdout, "no jobs among the %d searched\n", page.Searched)
		fmt.Fprintf(stdout, "\nmore may follow: add --cursor %s to search older ones\n", *next)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPTS\tCREATED AT (UTC)\tLAST ERROR")
	for _, j := range page.Jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, printable(j.Queue, false), printable(j.Kind, false), j.State,
			j.Attempts, j.MaxAttempts, j.CreatedAt.UTC().Format("2006-01-02 15:04:05"), errorLine(j.LastError, 60))
	}
	_ = tw.Flush()
	if next != nil {
		fmt.Fprintf(stdout, "\nmore may follow: add --cursor %s for the next page\n", *next)
	}
	return exitOK
}

func runJobIDs(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	name := "job " + action
	what := map[string]string{
		"get":     "Prints each job in full: its state, payload as it was enqueued (control characters\nescaped), metadata, attempts, times, last error and output (Client.JobGet).",
		"cancel":  "Cancels each job (Client.JobCancel): it moves to the failed jobs, from where\n`bunqueue failed retry` puts it back. A waiting job never runs afterwards; a running\nlease-mode job is cancelled at its next heartbeat; a job that runs in lock mode is\nlocked by its worker, and is an error.",
		"delete":  "Deletes each job for good, waiting, completed or failed (Client.JobDelete); a\nrunning job is an error.",
		"run-now": "Makes each scheduled or retrying job due now (Client.JobRunNow).",
	}[action]
	cmd, code := parseIDsCommand(name, what, "job", "job list", args, stderr)
	if code >= 0 {
		return code
	}
	d, c, err := failedClient(ctx, cmd.db, stderr)
	if err != nil {
		return fail(stderr, name, err)
	}
	defer d.close()
	a := &jobActions{c: c, d: d, action: action, asJSON: cmd.asJSON, stdout: stdout, stderr: stderr}
	for _, id := range cmd.ids {
		a.do(ctx, id)
	}
	return a.finish()
}

// jobActions runs one action of the job commands on ids, one after the
// other, and keeps their results and the exit code.
type jobActions struct {
	c              *bunqueue.Client
	d              *database
	action         string
	asJSON         bool
	stdout, stderr io.Writer
	results        []jobActionResult
	shown          []jobRecord
	code           int
}

func (a *jobActions) do(ctx context.Context, id int64) {
	r := jobActionResult{ID: id}
	var err error
	switch a.action {
	case "get":
		var j *bunqueue.JobRecord
		if j, err = a.c.JobGet(ctx, id); err == nil {
			a.shown = append(a.shown, toJobRecord(j))
			if !a.asJSON {
				printJob(a.stdout, j, len(a.shown) > 1)
			}
		}
	case "cancel":
		r.Was, err = a.c.JobCancel(ctx, id)
	case "delete":
		err = a.c.JobDelete(ctx, id)
	case "run-now":
		err = a.c.JobRunNow(ctx, id)
	}
	r.OK = err == nil
	switch {
	case errors.Is(err, bunqueue.ErrJobNotFound):
		r.NotFound, r.Error = true, fmt.Sprintf("no job with id %d", id)
		fmt.Fprintf(a.stderr, "bunqueue job %s: no job with id %d\n", a.action, id)
		if a.code == exitOK {
			a.code = exitNotFound
		}
	case err != nil:
		err = a.d.explain(err)
		r.Error = err.Error()
		fmt.Fprintf(a.stderr, "bunqueue job %s: %d: %v\n", a.action, id, err)
		a.code = exitError
	case a.asJSON || a.action == "get":
	case a.action == "cancel":
		fmt.Fprintf(a.stdout, "cancelled job %d (it was %s)\n", id, r.Was)
	case a.action == "delete":
		fmt.Fprintf(a.stdout, "deleted job %d\n", id)
	case a.action == "run-now":
		fmt.Fprintf(a.stdout, "job %d is due now\n", id)
	}
	a.results = append(a.results, r)
}

// finish prints the JSON of the results, and returns the exit code.
func (a *jobActions) finish() int {
	if !a.asJSON {
		return a.code
	}
	var v any = a.results
	if a.action == "get" {
		if a.shown == nil {
			a.shown = []jobRecord{}
		}
		v = a.shown
	}
	if err := writeJSON(a.stdout, v); err != nil {
		return fail(a.stderr, "job "+a.action, err)
	}
	return a.code
}

// printJob prints one job in full, safe for a terminal.
func printJob(w io.Writer, j *bunqueue.JobRecord, separate bool) {
	if separate {
		fmt.Fprintln(w)
	}
	const at = "2006-01-02 15:04:05.000000"
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "id:\t%d\n", j.ID)
	fmt.Fprintf(tw, "queue:\t%s\n", printable(j.Queue, false))
	fmt.Fprintf(tw, "kind:\t%s\n", printable(j.Kind, false))
	fmt.Fprintf(tw, "state:\t%s\n", j.State)
	fmt.Fprintf(tw, "attempts:\t%d of %d\n", j.Attempts, j.MaxAttempts)
	fmt.Fprintf(tw, "priority:\t%d\n", j.Priority)
	if j.UniqueKey != nil {
		fmt.Fprintf(tw, "unique key:\t%s\n", printable(*j.UniqueKey, false))
	}
	fmt.Fprintf(tw, "created at:\t%s UTC\n", j.CreatedAt.UTC().Format(at))
	if !j.RunAt.IsZero() {
		fmt.Fprintf(tw, "run at:\t%s UTC\n", j.RunAt.UTC().Format(at))
	}
	if j.CompletedAt != nil {
		fmt.Fprintf(tw, "completed at:\t%s UTC\n", j.CompletedAt.UTC().Format(at))
	}
	if j.Failed != nil {
		fmt.Fprintf(tw, "failed at:\t%s UTC\n", j.Failed.FailedAt.UTC().Format(at))
		fmt.Fprintf(tw, "failed id:\t%d (bunqueue failed retry %d)\n", j.Failed.ID, j.Failed.ID)
	}
	_ = tw.Flush()
	if len(j.Metadata) > 0 {
		b, _ := json.Marshal(j.Metadata)
		fmt.Fprintf(w, "metadata: %s\n", printable(string(b), false))
	}
	fmt.Fprintf(w, "args (%d bytes):\n%s\n", len(j.Args), indent(printable(string(j.Args), true)))
	if j.Output != nil {
		fmt.Fprintf(w, "output (%d bytes):\n%s\n", len(j.Output), indent(printable(string(j.Output), true)))
	}
	if j.LastError != "" {
		fmt.Fprintf(w, "last error:\n%s\n", indent(printable(j.LastError, true)))
	}
	if len(j.Errors) > 0 {
		fmt.Fprintf(w, "failed attempts (%d, oldest first):\n", len(j.Errors))
		for _, e := range j.Errors {
			fmt.Fprintf(w, "  %d  %s UTC  %s\n", e.Attempt, e.At.UTC().Format(at), errorLine(e.Error, 100))
		}
	}
}
