package bunqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/uptrace/bun"
)

// JobArgs is the payload of a job in the jobs table. Its Kind names the
// worker that runs it; the value itself is stored as JSON.
type JobArgs interface {
	// Kind returns the job's kind, such as "welcome_email": 1 to 255
	// bytes of UTF-8 without NUL, compared byte for byte. It must be the
	// same for every value of the type, and must not change once jobs of
	// the kind have been enqueued.
	Kind() string
}

// Job is a job of the jobs table, with its decoded arguments.
type Job[T JobArgs] struct {
	// ID is the job's primary key in the jobs table.
	ID int64
	// Queue is the name of the job's queue.
	Queue string
	// Kind is Args.Kind() as it was enqueued.
	Kind string
	// Args are the decoded arguments.
	Args T
	// Attempt is the number of this attempt: 1 the first time.
	Attempt int
	// MaxAttempts is how many attempts the job gets before it moves to
	// the failed-jobs table.
	MaxAttempts int
	// RunAt is when the job was due, in UTC.
	RunAt time.Time
	// CreatedAt is when the job was enqueued, in UTC.
	CreatedAt time.Time
	// Metadata is what EnqueueOpts.Metadata carried.
	Metadata map[string]string
}

// Worker runs jobs of one kind.
type Worker[T JobArgs] interface {
	// Work runs the job. db is the job's transaction in lock mode: writes
	// made through it commit together with the job's completion, or not
	// at all. In lease mode no transaction is held while the job runs: db
	// is the client's *bun.DB, and db.RunInTx opens one where the job's
	// writes must be atomic.
	//
	// Return nil to complete the job; Snooze(d) to run it again after d
	// without using an attempt; Cancel(err) to fail it for good; any other
	// error (or a panic) to retry it with backoff until MaxAttempts. On
	// every result but nil, the writes made through db in lock mode are
	// undone, back to the job's savepoint, which is taken before the
	// first statement run through db (see HandlerFunc): a job that runs
	// none costs no SAVEPOINT.
	Work(ctx context.Context, db bun.IDB, job *Job[T]) error
}

// WorkerFunc adapts a function to a Worker.
type WorkerFunc[T JobArgs] func(ctx context.Context, db bun.IDB, job *Job[T]) error

// Work implements Worker.
func (f WorkerFunc[T]) Work(ctx context.Context, db bun.IDB, job *Job[T]) error {
	return f(ctx, db, job)
}

// AddWorker registers the worker of jobs of kind T on the client. A
// client runs the jobs table's queues (Config.JobQueues) only if at least
// one worker was added. Add workers before Start; one worker per kind.
// A kind no job could be enqueued with (see JobArgs) is refused with an
// error that wraps ErrInvalidJob.
func AddWorker[T JobArgs](c *Client, w Worker[T]) error {
	if c == nil || w == nil {
		return fmt.Errorf("bunqueue: AddWorker: client and worker must not be nil")
	}
	var zero T
	if reflect.TypeOf(zero) == nil {
		return fmt.Errorf("bunqueue: AddWorker: the job args type must be a concrete type, not an interface")
	}
	kind := zero.Kind()
	if err := checkKind(fmt.Sprintf("%T.Kind()", zero), kind); err != nil {
		return invalidJob{fmt.Errorf("bunqueue: AddWorker: %w", err)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unstarted(); err != nil {
		return err
	}
	if c.kinds[kind] != nil {
		return fmt.Errorf("bunqueue: AddWorker: a worker for kind %q was already added", kind)
	}
	c.kinds[kind] = func(ctx context.Context, db bun.IDB, row *jobRow, attempt int) error {
		job := &Job[T]{
			ID: row.ID, Queue: row.Queue, Kind: row.Kind, Attempt: attempt,
			MaxAttempts: row.MaxAttempts, RunAt: row.RunAt.UTC(), CreatedAt: row.CreatedAt.UTC(), // pgx reads timestamptz in time.Local
		}
		if err := json.Unmarshal(row.Args, &job.Args); err != nil {
			return Cancel(fmt.Errorf("bunqueue: decode the args of job %d (kind %q) into %T: %w", row.ID, row.Kind, job.Args, err))
		}
		if len(row.Metadata) > 0 {
			if err := json.Unmarshal(row.Metadata, &job.Metadata); err != nil {
				return Cancel(fmt.Errorf("bunqueue: decode the metadata of job %d: %w", row.ID, err))
			}
		}
		return w.Work(ctx, db, job)
	}
	return nil
}

// runJob decodes a job row and runs its worker.
type runJob func(ctx context.Context, db bun.IDB, row *jobRow, attempt int) error

// JobMode is how a queue of the jobs table holds a job while it runs.
type JobMode int

const (
	// ModeLock holds the job's row lock in a transaction for the whole of
	// its work; completion commits with the worker's writes. For work of
	// seconds.
	ModeLock JobMode = iota
	// ModeLease claims the job in a short transaction that sets a lease,
	// runs it outside any transaction, extends the lease with heartbeats,
	// and completes it only if it still holds the lease. For work of
	// minutes.
	ModeLease
)

// String returns "lock" or "lease".
func (m JobMode) String() string {
	switch m {
	case ModeLock:
		return "lock"
	case ModeLease:
		return "lease"
	}
	return fmt.Sprintf("JobMode(%d)", int(m))
}

// jobRow is a row of bunqueue_jobs (see jobsql.Row).
type jobRow = jobsql.Row
