package bunqueuetest

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// RequireEnqueuedOpts are what a job must match besides its kind and
// args, for RequireEnqueued and RequireNotEnqueued. A nil
// *RequireEnqueuedOpts, and zero fields, match any job.
type RequireEnqueuedOpts struct {
	// Queue, if set, is the job's queue.
	Queue string
	// Priority, if not nil, is the job's priority (0 included).
	Priority *int
	// MaxAttempts, if set, is the job's max attempts.
	MaxAttempts int
	// UniqueKey, if set, is the job's unique key.
	UniqueKey string
	// Metadata, if set, are pairs the job's metadata must have; it may
	// have others.
	Metadata map[string]string
	// RunAt, if set, is when the job is due: to the microsecond, as it is
	// stored, or within RunAtWithin of it.
	RunAt time.Time
	// RunAtWithin is how far the job's due time may be from RunAt, for a
	// job enqueued with a Delay (due that long after the database's now).
	// It must not be negative, and needs RunAt.
	RunAtWithin time.Duration
	// Tables are the tables the jobs are in: the client's Config.Tables.
	// The zero value is bunqueue's default tables.
	Tables bunqueue.Tables
}

// EnqueuedJob is a pending job as RequireEnqueued found it.
type EnqueuedJob[T bunqueue.JobArgs] struct {
	// ID is the job's primary key in the jobs table.
	ID int64
	// Queue is the job's queue and Kind its kind.
	Queue string
	Kind  string
	// Args are the job's args, decoded from their JSON.
	Args T
	// Priority is the job's priority: lower runs first.
	Priority int
	// Attempts is how many attempts the job has had so far, and
	// MaxAttempts how many it gets.
	Attempts    int
	MaxAttempts int
	// RunAt is when the job is due, in UTC; while a lease-mode worker
	// runs it, when its lease ends.
	RunAt time.Time
	// CreatedAt is when the job was enqueued, in UTC.
	CreatedAt time.Time
	// UniqueKey is the job's unique key, "" for none.
	UniqueKey string
	// Metadata is the job's metadata, nil for none.
	Metadata map[string]string
}

// RequireEnqueued checks that exactly one pending job of the kind of
// want matches want and opts, and returns it: every exported field of
// want that is not its zero value must equal the job's, compared as
// stored, in JSON (to check that a field is zero, look at the returned
// job's Args). Otherwise it fails the test with t.Fatalf, listing the
// pending jobs of the kind and how each differs. It reads through db,
// which sees committed jobs only: use RequireEnqueuedTx inside the
// transaction that enqueued them.
func RequireEnqueued[T bunqueue.JobArgs](ctx context.Context, t testing.TB, db *bun.DB, want T, opts *RequireEnqueuedOpts) *EnqueuedJob[T] {
	t.Helper()
	return requireEnqueued(ctx, t, "RequireEnqueued", db, want, opts)
}

// RequireEnqueuedTx is RequireEnqueued through tx: it sees the jobs that
// tx enqueued, before it commits, and those that others committed.
func RequireEnqueuedTx[T bunqueue.JobArgs](ctx context.Context, t testing.TB, tx bun.Tx, want T, opts *RequireEnqueuedOpts) *EnqueuedJob[T] {
	t.Helper()
	return requireEnqueued(ctx, t, "RequireEnqueuedTx", tx, want, opts)
}

// RequireNotEnqueued checks that no pending job of the kind of unwanted
// matches unwanted and opts, as RequireEnqueued matches them (a zero
// unwanted matches every job of its kind). Otherwise it fails the test
// with t.Fatalf, listing the jobs that match. It reads through db, which
// sees committed jobs only.
func RequireNotEnqueued[T bunqueue.JobArgs](ctx context.Context, t testing.TB, db *bun.DB, unwanted T, opts *RequireEnqueuedOpts) {
	t.Helper()
	requireNotEnqueued(ctx, t, "RequireNotEnqueued", db, unwanted, opts)
}

// RequireNotEnqueuedTx is RequireNotEnqueued through tx: the jobs that tx
// enqueued count, before it commits.
func RequireNotEnqueuedTx[T bunqueue.JobArgs](ctx context.Context, t testing.TB, tx bun.Tx, unwanted T, opts *RequireEnqueuedOpts) {
	t.Helper()
	requireNotEnqueued(ctx, t, "RequireNotEnqueuedTx", tx, unwanted, opts)
}

func requireEnqueued[T bunqueue.JobArgs](ctx context.Context, t testing.TB, fn string, db bun.IDB, want T, opts *RequireEnqueuedOpts) *EnqueuedJob[T] {
	t.Helper()
	s, err := search(ctx, db, want, opts)
	switch {
	case err != nil:
		t.Fatalf("bunqueuetest: %s: %v", fn, err)
		return nil
	case len(s.matched) == 1:
		return s.matched[0].job
	case len(s.matched) > 1:
		t.Fatalf("bunqueuetest: %s: %s, want exactly one (tell them apart with args or options):\n%s",
			fn, jobsMatch(len(s.matched), s.kind), s.list(s.matched))
		return nil
	case len(s.others) > 0:
		t.Fatalf("bunqueuetest: %s: no pending job of kind %q matches; %s:\n%s",
			fn, s.kind, othersDiffer(len(s.others)), s.list(s.others))
		return nil
	}
	t.Fatalf("bunqueuetest: %s: no pending job of kind %q; %s", fn, s.kind, s.kinds(ctx, db))
	return nil
}

func requireNotEnqueued[T bunqueue.JobArgs](ctx context.Context, t testing.TB, fn string, db bun.IDB, unwanted T, opts *RequireEnqueuedOpts) {
	t.Helper()
	s, err := search(ctx, db, unwanted, opts)
	switch {
	case err != nil:
		t.Fatalf("bunqueuetest: %s: %v", fn, err)
	case len(s.matched) > 0:
		t.Fatalf("bunqueuetest: %s: %s, want none:\n%s", fn, jobsMatch(len(s.matched), s.kind), s.list(s.matched))
	}
}
