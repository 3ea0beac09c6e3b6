package bunqueue

import (
	"errors"
	"fmt"
	"time"
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
	// EnqueueMany, FailedJobs, RetryFailed, DeleteFailed) when the jobs
	// tables do not exist in the database: run Migrate first.
	ErrNotMigrated = errors.New("bunqueue: the jobs tables (bunqueue_jobs, bunqueue_failed_jobs) do not exist: run bunqueue.Migrate (or `bunqueue migrate`) first")

	// ErrStopped is returned by Client.Start after Client.Stop: a client
	// runs once; create a new one to run again.
	ErrStopped = errors.New("bunqueue: client stopped; create a new Client to start again")
)

// PanicError is the error a handler's panic is turned into. The worker
// survives; the item is treated as failed.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string {
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
}

// Error implements error.
func (e *ItemError) Error() string {
	s := fmt.Sprintf("bunqueue: queue %q: row %s: %v", e.Queue, e.Key, e.Err)
	if e.Cooldown > 0 {
		s += fmt.Sprintf(" (left alone for %s)", e.Cooldown.Round(time.Millisecond))
	}
	return s
}

// Unwrap returns Err.
func (e *ItemError) Unwrap() error { return e.Err }

// Snooze returns an error that, returned by a Worker, puts the job back
// to run again after d (from the database clock) without using an
// attempt. In lock mode the worker's writes are undone.
func Snooze(d time.Duration) error {
	return &snoozeError{after: max(d, 0)}
}

type snoozeError struct{ after time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("bunqueue: job snoozed for %s", e.after) }

// Cancel returns an error that, returned by a Worker, fails the job at
// once: it moves to the failed-jobs table with err, whatever attempts it
// had left. In lock mode the worker's writes are undone.
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled")
	}
	return &cancelError{err: err}
}

type cancelError struct{ err error }

func (e *cancelError) Error() string { return "bunqueue: job cancelled: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// ErrFailedJobNotFound is returned by RetryFailed and DeleteFailed for an
// id that is not in the failed-jobs table.
var ErrFailedJobNotFound = errors.New("bunqueue: no failed job with that id")

// notMigrated wraps err, an error of a query on the jobs tables, with
// ErrNotMigrated if it says a table does not exist.
func (c *Client) notMigrated(err error) error {
	if err != nil && c.dialect.MissingTable(err) {
		return fmt.Errorf("%w (%w)", ErrNotMigrated, err)
	}
	return err
}
