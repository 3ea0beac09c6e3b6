package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
)

// exitNotFound is the exit code of a failed-jobs command given an id that
// is not in the failed-jobs table.
const exitNotFound = 3

// parseWithArgs parses a subcommand's flags, which may come before, after
// or between its positional arguments, and returns those arguments. It
// returns the exit code to stop with, or -1 to go on.
func parseWithArgs(fs *flag.FlagSet, args []string) ([]string, int) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK
			}
			return nil, exitUsage
		}
		if fs.NArg() == 0 {
			return positional, -1
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseIDs parses the ids of jobs or failed jobs.
func parseIDs(fs *flag.FlagSet, args []string) ([]int64, bool) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			fmt.Fprintf(fs.Output(), "%s: %q is not an id (a positive number)\n", fs.Name(), a)
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// idsCommand is the parsed command line of a command that acts on ids,
// such as `failed retry ID...` or `job cancel ID...`.
type idsCommand struct {
	ids    []int64
	db     dbFlags
	asJSON bool
}

// parseIDsCommand parses the flags (--dsn, --json) and the ids of the
// command name, whose help is what; noun names what an id is ("failed
// job"), list the command that lists them. It returns the exit code to
// stop with, or -1 to go on.
func parseIDsCommand(name, what, noun, list string, args []string, stderr io.Writer) (idsCommand, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbf := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bunqueue %s [--dsn DSN] [--prefix P] [--schema S] [--json] ID...\n\n%s\n\n", name, what)
		fs.PrintDefaults()
	}
	positional, code := parseWithArgs(fs, args)
	if code >= 0 {
		return idsCommand{}, code
	}
	if len(positional) == 0 {
		fmt.Fprintf(stderr, "%s: give the id of at least one %s (see `bunqueue %s`)\n", name, noun, list)
		fs.Usage()
		return idsCommand{}, exitUsage
	}
	ids, ok := parseIDs(fs, positional)
	if !ok {
		return idsCommand{}, exitUsage
	}
	return idsCommand{ids: ids, db: dbf, asJSON: *asJSON}, -1
}
