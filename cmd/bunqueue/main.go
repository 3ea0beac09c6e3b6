// Command bunqueue is the command-line tool of bunqueue.
//
// Usage:
//
//	bunqueue <command> [flags]
//
// Commands:
//
//	migrate  create or upgrade bunqueue's tables (bunqueue_jobs, bunqueue_failed_jobs, bunqueue_queues)
//	stats    count the jobs of the jobs table per queue and kind: waiting, scheduled, failed
//	failed   list, show, retry or delete failed jobs
//	queue    list, pause or resume queues, for every process
//	job      get, list, cancel, delete or run jobs now, in any state
//	help     print this help
//
// Run "bunqueue <command> -h" for the flags of a command. Every command
// reads the DSN from --dsn, else BUNQUEUE_MYSQL_DSN, else
// root@tcp(127.0.0.1:3306)/test; --json prints its result as JSON. A
// postgres:// or postgresql:// URL names a PostgreSQL server; any other
// DSN is a MySQL or MariaDB one. Every command works on both.
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
)

// Exit codes: 0 success, 1 a runtime error, 2 a usage error (and
// exitNotFound, 3, in cli.go).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultDSN is used when neither --dsn nor BUNQUEUE_MYSQL_DSN is set.
const defaultDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"

// dsnUsage is the help text of the commands' --dsn flag.
const dsnUsage = "MySQL/MariaDB DSN, or a postgres:// URL for PostgreSQL (default: $BUNQUEUE_MYSQL_DSN, else " + defaultDSN + ")"

// command is one subcommand of the tool.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"migrate", "create or upgrade bunqueue's tables (bunqueue_jobs, bunqueue_failed_jobs, bunqueue_queues)", runMigrate},
		{"stats", "count the jobs of the jobs table per queue and kind: waiting, scheduled, failed", runStats},
		{"failed", "list, show, retry or delete failed jobs", runFailed},
		{"queue", "list, pause or resume queues, for every process", runQueue},
		{"job", "get, list, cancel, delete or run jobs now, in any state", runJob},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "bunqueue: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: bunqueue <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "print this help")
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "bunqueue <command> -h" for the flags of a command. The DSN comes from --dsn,`)
	fmt.Fprintln(w, "else BUNQUEUE_MYSQL_DSN, else "+defaultDSN+".")
	fmt.Fprintln(w, "A postgres:// (or postgresql://) URL names a PostgreSQL server, any other DSN a")
	fmt.Fprintln(w, "MySQL or MariaDB one. Every command works on both.")
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

// dsnFrom returns the DSN of the --dsn flag, else BUNQUEUE_MYSQL_DSN, else
// defaultDSN.
func dsnFrom(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("BUNQUEUE_MYSQL_DSN"); v != "" {
		return v
	}
	return defaultDSN
}
