// Package testbridge lends package bunqueuetest what it needs of a
// bunqueue.Client that the client does not export: its database, and a
// way to run one job through the client's own worker path. Package
// bunqueue sets the functions when it is initialised; bunqueuetest
// imports bunqueue, so they are set before any of its code runs.
//
// The functions take the client as an any: this package cannot name
// *bunqueue.Client, which imports it.
package testbridge

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// Result is what became of a job that WorkJob ran.
type Result struct {
	// Outcome is "completed", "retried", "snoozed", "failed" (it moved to
	// the failed jobs after its last attempt) or "cancelled" (it moved to
	// the failed jobs through bunqueue.Cancel).
	Outcome string
	// Err is the worker's error; nil when the job completed.
	Err error
	// RetryIn is how long until the job runs again, for "retried" and
	// "snoozed".
	RetryIn time.Duration
	// Attempt is the attempt that ran, from 1.
	Attempt int
}

var (
	// DB returns the database of a *bunqueue.Client.
	DB func(client any) *bun.DB
	// WorkJob runs the pending job id through the worker path of a
	// *bunqueue.Client's queue of the job, in the calling goroutine, and
	// returns what became of it; the error says why it could not run, or
	// why what became of it could not be recorded.
	WorkJob func(ctx context.Context, client any, id int64) (Result, error)
)
