// Command bunqueue-bench measures, each for a fixed time, the database's
// commit ceiling and bunqueue's throughput and latency against it.
//
// Usage:
//
//	bunqueue-bench [--quick] [--dsn DSN] [--json] [--duration D] [--only NAMES] [flags]
//
// Run "bunqueue-bench -h" for its flags; docs/bench.md describes its
// scenarios and columns, docs/performance.md what it measured. It reads
// the DSN from --dsn, else BUNQUEUE_MYSQL_DSN, else
// root@tcp(127.0.0.1:3306)/test; --json prints the results as JSON. A
// postgres:// or postgresql:// URL names a PostgreSQL server; any other
// DSN is a MySQL or MariaDB one. It works on both.
//
// Exit codes: 0 success, 1 an error (the database cannot be reached,
// another bench holds the database, a scenario failed), 2 a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

// Exit codes: 0 success, 1 a runtime error, 2 a usage error.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultDSN is used when neither --dsn nor BUNQUEUE_MYSQL_DSN is set.
const defaultDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"

// dsnUsage is the help text of the --dsn flag.
const dsnUsage = "MySQL/MariaDB DSN, or a postgres:// URL for PostgreSQL (default: $BUNQUEUE_MYSQL_DSN, else " + defaultDSN + ")"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the bench with args, or the internal child a scenario started,
// and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == childCommand { // internal: not in the usage text
		return runChild(ctx, args[1:], stdout, stderr)
	}
	return runBench(ctx, args, stdout, stderr)
}

// parseFlags parses the flags of the bench or its child. It returns the
// exit code to stop with, or -1 to go on.
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

// isPostgresDSN reports whether dsn names a PostgreSQL server: a
// postgres:// or postgresql:// URL. Anything else is a MySQL DSN.
func isPostgresDSN(dsn string) bool {
	dsn = strings.ToLower(strings.TrimSpace(dsn))
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}
