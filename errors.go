package bunqueue

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue/internal/tables"
)

var (
	// ErrStillQueued is wrapped by the error reported when a handler
	// returned nil but its row still matches the queue query. That breaks
	// the one rule of a query-defined queue: processing must change the
	// row so that it leaves the query. The handler's writes are rolled
	// back and this process cools the row down instead of looping on it.
	ErrStillQueued = errors.New("the handler returned nil but the row still matches the queue query; " +
		"the handler must change the row (through the tx it was given) so that it leaves the query")

	// ErrNotAdded is returned by Queue methods that need a database before
	// the queue was added to a Client.
	ErrNotAdded = errors.New("bunqueue: queue not added to a Client; call Client.Add first")

	// ErrStarted is returned by Client.Add and Client.Start once the
	// client has started.
	ErrStarted = errors.New("bunqueue: client already started")

	// ErrNotMigrated is wrapped by the errors of the jobs API (Enqueue,
	// EnqueueMany, FailedJobs, RetryFailed, DeleteFailed, JobGet, JobList
	// and the job actions) when the jobs tables do not exist in the
	// database, or lack a column of this version's schema: run Migrate.
	ErrNotMigrated = errors.New("bunqueue: the jobs tables do not exist: run bunqueue.Migrate (or `bunqueue migrate`) first")

	// ErrStopped is returned by Client.Start after Client.Stop: a client
	// runs once; create a new one to run again.
	ErrStopped = errors.New("bunqueue: client stopped; create a new Client to start again")

	// ErrGoexit is the error of an item whose handler, worker, lifecycle
	// hook or OnError called runtime.Goexit (as t.FailNow and t.SkipNow
	// do) instead of returning. The item fails as if it had returned this
	// error; the worker goes on.
	ErrGoexit = errors.New("the handler called runtime.Goexit instead of returning")
)

// PanicError is the error a panic in the app's code (a handler, a worker,
// a lifecycle hook, OnError) is turned into. It also stands for an error
// they returned that cannot be read, whose Error method panics, as that of
// a nil pointer returned as an error often does. The worker survives; the
// item is treated as failed.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string {
	if err, ok := e.Value.(error); ok && err != nil {
		return "bunqueue: handler panicked: " + unprefixed(err)
	}
	return fmt.Sprintf("bunqueue: handler panicked: %v", e.Value)
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ItemError reports the failure of one row: its handler's error, or
// ErrStillQueued. Workers log it; Queue.ProcessNext returns it.
type ItemError struct {
	// Queue is the queue's name.
	Queue string
	// Key names the row by its primary key, such as "id=42".
	Key string
	// Err is what went wrong.
	Err error
	// Recorded is true when QueueConfig.OnError recorded the failure and
	// its writes committed with the batch.
	Recorded bool
	// Cooldown is how long this process leaves the row alone, when the
	// failure was not recorded on the row.
	Cooldown time.Duration

	job *jobFate // a job's: what became of it, for the worker's log
}

// Error implements error.
func (e *ItemError) Error() string {
	s := fmt.Sprintf("bunqueue: queue %q: row %s: %s", e.Queue, e.Key, unprefixed(e.Err))
	if e.Cooldown > 0 {
		s += fmt.Sprintf(" (left alone for %s)", e.Cooldown.Round(time.Millisecond))
	}
	return s
}

// Unwrap returns Err.
func (e *ItemError) Unwrap() error { return e.Err }

// ErrFailedJobNotFound is returned by RetryFailed and DeleteFailed for an
// id that is not in the failed-jobs table.
var ErrFailedJobNotFound = errors.New("bunqueue: no failed job with that id")

// notMigrated wraps err, an error of a query on the jobs tables, with
// ErrNotMigrated if it says a table, or a column of one, does not exist.
// Its message is ErrNotMigrated's, or for a column that the tables are of
// an older schema version, without the "bunqueue: " its callers add.
func (c *Client) notMigrated(err error) error {
	switch {
	case err == nil:
		return nil
	case c.dialect.MissingTable(err):
		return &notMigratedError{err: err, tables: c.tables, hint: c.migrateHint()}
	case c.dialect.MissingColumn(err):
		return &notMigratedError{err: err, tables: c.tables, hint: c.migrateHint(), older: true}
	}
	return err
}

// notMigratedError is ErrNotMigrated with the error that showed it; older
// says the tables exist, of an older schema version.
type notMigratedError struct {
	err    error
	tables tables.Names
	hint   string // how to migrate them
	older  bool
}

func (e *notMigratedError) Error() string {
	which := "the jobs tables (" + e.tables.Jobs + ", " + e.tables.FailedJobs + ")"
	if e.older {
		return which + " are of an older schema version: run " + e.hint + " (" + e.err.Error() + ")"
	}
	return which + " do not exist: run " + e.hint + " first (" + e.err.Error() + ")"
}

func (e *notMigratedError) Unwrap() []error { return []error{ErrNotMigrated, e.err} }

// unprefixed is err's message without a leading "bunqueue: ", for an
// error that wraps it and says "bunqueue: " itself.
func unprefixed(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), "bunqueue: ")
}

// errorf is fmt.Errorf for the errors of the package, whose format starts
// with "bunqueue: ", that wrap (%w) or show (%v) other errors: their
// messages are written without their own "bunqueue: ", so that the
// message says it once ("bunqueue: get job 7: no job with that id", not
// "bunqueue: get job 7: bunqueue: no job with that id"), and the errors
// %w wraps stay in the chain, for errors.Is and errors.As.
func errorf(format string, args ...any) error {
	shown := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok && err != nil {
			a = unprefixedError{err}
		}
		shown[i] = a
	}
	return &wrapError{msg: fmt.Errorf(format, shown...).Error(), chain: fmt.Errorf(format, args...)}
}

// unprefixedError shows an error without its leading "bunqueue: ".
type unprefixedError struct{ err error }

func (e unprefixedError) Error() string { return unprefixed(e.err) }

// wrapError is an error of errorf: its message, and the errors that
// chain, the fmt.Errorf of the same format and arguments, wraps.
type wrapError struct {
	msg   string
	chain error
}

func (e *wrapError) Error() string { return e.msg }

func (e *wrapError) Unwrap() []error {
	switch c := e.chain.(type) {
	case interface{ Unwrap() []error }:
		return c.Unwrap()
	case interface{ Unwrap() error }:
		return []error{c.Unwrap()}
	}
	return nil
}
