// Command bunqueue is the command-line tool of bunqueue.
//
// Usage:
//
//	bunqueue [--dsn DSN] [--prefix P] [--schema S] [--json] <command> [flags]
//
// Commands:
//
//	migrate    create or upgrade bunqueue's tables (see migrate -h)
//	stats      count the jobs of the jobs table per queue and kind: waiting, scheduled, failed
//	failed     list, show, retry or delete failed jobs
//	queue      list, pause or resume queues, for every process
//	job        get, list, cancel, delete or run jobs now, in any state
//	processes  list the processes that run queues, live and stale
//	help       print this help
//
// Run "bunqueue <command> -h" for the flags of a command. --dsn, --prefix,
// --schema and --json, which every command takes, go before or after the
// command (after it, they win); the command's other flags go after it.
// --json prints the result as JSON.
//
// bunqueue's tables are, by default, bunqueue_jobs, bunqueue_failed_jobs,
// bunqueue_queues, bunqueue_periodic, bunqueue_slots, bunqueue_job_deps,
// bunqueue_sequences, bunqueue_processes, bunqueue_history, bunqueue_leases,
// bunqueue_migrations.
// An app whose Config.Tables gives them a prefix or a PostgreSQL schema is
// reached with the same --prefix (else $BUNQUEUE_TABLE_PREFIX) and
// --schema (else $BUNQUEUE_TABLE_SCHEMA).
//
// The DSN comes from --dsn, else BUNQUEUE_DSN, else the older names
// BUNQUEUE_MYSQL_DSN, then BUNQUEUE_PG_DSN, else
// root@tcp(127.0.0.1:3306)/test. The DSN names the server, whichever
// variable holds it: a postgres:// or postgresql:// URL is a PostgreSQL
// server, any other DSN a MySQL or MariaDB one
// (user:password@tcp(host:3306)/database). Every command works on both.
//
// Exit codes: 0 success, 1 an error (the database cannot be reached, the
// jobs tables are missing, a query failed), 2 a usage error, 3 an id
// given to "failed show|retry|delete" is not a failed job's, or one given
// to "job get|cancel|delete|run-now" is no job's (the other ids were
// dealt with).
//
// The bench, which measures throughput and latency against the server, is
// a command of its own: github.com/bunqueue/bunqueue/cmd/bunqueue-bench.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
)

// Exit codes: 0 success, 1 a runtime error, 2 a usage error (and
// exitNotFound, 3, in cli.go).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultDSN is used when neither --dsn nor any of dsnVariables is set.
const defaultDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"

// dsnUsage is the help text of the commands' --dsn flag.
const dsnUsage = "MySQL/MariaDB DSN, or a postgres:// URL for PostgreSQL (default: $BUNQUEUE_DSN, else the older\n" +
	"$BUNQUEUE_MYSQL_DSN, then $BUNQUEUE_PG_DSN, else " + defaultDSN + ")"

// command is one subcommand of the tool.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	// grouped: its first argument names one of its own subcommands, as
	// in `failed list`.
	grouped bool
}

func commands() []command {
	return []command{
		{"migrate", "create or upgrade bunqueue's tables (see migrate -h)", runMigrate, false},
		{"stats", "count the jobs of the jobs table per queue and kind: waiting, scheduled, failed", runStats, false},
		{"failed", "list, show, retry or delete failed jobs", runFailed, true},
		{"queue", "list, pause or resume queues, for every process", runQueue, true},
		{"job", "get, list, cancel, delete or run jobs now, in any state", runJob, true},
		{"processes", "list the processes that run queues, live and stale", runProcesses, false},
	}
}

// lookup returns the command called name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	args, code := moveGlobalFlags(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	if c, ok := lookup(args[0]); ok {
		return c.run(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bunqueue: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

// moveGlobalFlags parses the flags before the command, --dsn, --prefix,
// --schema and --json (every command takes them), and moves them after the command's name
// (and its subcommand's, as in `failed list`), where the command parses
// them before its own flags: a flag given after the command wins. It
// returns the exit code to stop with, or -1 to go on.
func moveGlobalFlags(args []string, stdout, stderr io.Writer) ([]string, int) {
	fs := flag.NewFlagSet("bunqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the errors are said below
	addDBFlags(fs)
	fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil, exitOK
		}
		fmt.Fprintf(stderr, "bunqueue: %v (before the command, only --dsn, --prefix, --schema and --json; the command's other flags go after it)\n\n", err)
		usage(stderr)
		return nil, exitUsage
	}
	rest := fs.Args()
	var moved []string
	fs.Visit(func(f *flag.Flag) { moved = append(moved, "--"+f.Name+"="+f.Value.String()) })
	if len(moved) == 0 || len(rest) == 0 {
		return rest, -1
	}
	c, ok := lookup(rest[0])
	at := 1
	switch {
	case !ok: // help, or an unknown command: said by run
		return rest, -1
	case c.grouped:
		if len(rest) < 2 || strings.HasPrefix(rest[1], "-") {
			return rest, -1 // no subcommand: the command says how to call it
		}
		at = 2
	}
	return slices.Concat(rest[:at], moved, rest[at:]), -1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: bunqueue [--dsn DSN] [--prefix P] [--schema S] [--json] <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "print this help")
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "bunqueue <command> -h" for the flags of a command. --dsn, --prefix, --schema`)
	fmt.Fprintln(w, "and --json, which every command takes, go before or after the command (after it,")
	fmt.Fprintln(w, "they win); the command's other flags go after it. --json prints the result as")
	fmt.Fprintln(w, "JSON.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "bunqueue's tables are, by default, "+tablesList()+".")
	fmt.Fprintln(w, "An app whose Config.Tables gives them a prefix or a PostgreSQL schema is reached")
	fmt.Fprintln(w, "with the same --prefix (else $"+prefixVariable+") and --schema (else $"+schemaVariable+").")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The DSN comes from --dsn, else BUNQUEUE_DSN, else the older names")
	fmt.Fprintln(w, "BUNQUEUE_MYSQL_DSN, then BUNQUEUE_PG_DSN, else")
	fmt.Fprintln(w, defaultDSN+".")
	fmt.Fprintln(w, "The DSN names the server, whichever variable holds it: a postgres:// (or")
	fmt.Fprintln(w, "postgresql://) URL is a PostgreSQL server, any other DSN a MySQL or MariaDB one")
	fmt.Fprintln(w, "(user:password@tcp(host:3306)/database). Every command works on both.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit codes: 0 success, 1 error, 2 usage error, 3 an id was not found (a failed job's, or a job's).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The bench, which measures throughput and latency, is a command of its own:")
	fmt.Fprintln(w, "bunqueue-bench (cmd/bunqueue-bench).")
}

// parseFlags parses a subcommand's flags. It returns the exit code to
// stop with, or -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	return -1
}

// dsnVariable is the environment variable of the DSN when --dsn is not
// given.
const dsnVariable = "BUNQUEUE_DSN"

// dsnVariables are the environment variables read for the DSN, in order:
// dsnVariable, then the older names, which despite theirs have always
// been read for either server (the server comes from the DSN itself).
func dsnVariables() []string {
	return []string{dsnVariable, "BUNQUEUE_MYSQL_DSN", "BUNQUEUE_PG_DSN"}
}

// resolveDSN returns the DSN of the --dsn flag, else that of the first of
// dsnVariables that getenv finds set, else defaultDSN; and where it came
// from, for messages: "from --dsn", "from BUNQUEUE_DSN", "the default,
// ...".
func resolveDSN(flagValue string, getenv func(string) string) (dsn, source string) {
	if flagValue != "" {
		return flagValue, "from --dsn"
	}
	for _, name := range dsnVariables() {
		if v := getenv(name); v != "" {
			return v, "from " + name
		}
	}
	return defaultDSN, "the default, " + defaultDSN
}
