package bunqueue

import (
	"errors"
	"fmt"
	"time"
)

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

func (e *cancelError) Error() string { return "bunqueue: job cancelled: " + unprefixed(e.err) }

func (e *cancelError) Unwrap() error { return e.err }
