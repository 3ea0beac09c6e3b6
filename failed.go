package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// FailedJob is a job that used up its attempts or was cancelled, as kept
// in the failed jobs table: bunqueue_failed_jobs, the name in its model's
// tag, or its name under the client's Config.Tables (a query of your own
// on such a table names it with ModelTableExpr).
type FailedJob struct {
	bun.BaseModel `bun:"table:bunqueue_failed_jobs,alias:f"`

	// ID is the failed job's id in bunqueue_failed_jobs.
	ID int64 `bun:",pk,autoincrement"`
	// JobID is the id the job had in the jobs table.
	JobID int64
	Queue string
	Kind  string
	// Args are the job's payload, byte for byte as it was enqueued: it is
	// never parsed on the way here.
	Args []byte
	// Metadata is the JSON of EnqueueOpts.Metadata, or nil.
	Metadata    []byte
	Priority    int
	Attempts    int
	MaxAttempts int
	// UniqueKey is the job's EnqueueOpts.UniqueKey, or nil.
	UniqueKey *string
	// LimitKey is the job's EnqueueOpts.LimitKey, or nil.
	LimitKey *string
	// Error is the last attempt's error; for a panic, with its stack.
	Error     string
	CreatedAt time.Time
	FailedAt  time.Time
	// TraceContext is the trace context the job was enqueued with; a
	// replayed job keeps it.
	TraceContext []byte
	// Errors are the job's failed attempts, oldest first, the last one's
	// error being Error (cut to AttemptErrorBytes); RetryFailed keeps them.
	Errors AttemptErrors `bun:"attempt_errors"`
}

// FailedJobsFilter selects failed jobs, newest first. Its zero value
// lists the 100 newest of all queues and kinds.
type FailedJobsFilter struct {
	// Queue and Kind, when set, keep only failed jobs of that queue and
	// kind.
	Queue string
	Kind  string
	// BeforeID, when set, keeps only failed jobs whose ID is below it: pass
	// the last ID of a page to get the next one.
	BeforeID int64
	// Limit is the most failed jobs returned, 1 to 1000. Defaults to 100.
	Limit int
}

// FailedJobs lists failed jobs, newest first.
func (c *Client) FailedJobs(ctx context.Context, filter FailedJobsFilter) ([]FailedJob, error) {
	return c.FailedJobsTx(ctx, c.db, filter)
}

// FailedJobsTx is FailedJobs through db, a transaction or a connection of
// the app's.
func (c *Client) FailedJobsTx(ctx context.Context, db bun.IDB, filter FailedJobsFilter) ([]FailedJob, error) {
	if filter.Limit == 0 {
		filter.Limit = 100
	}
	if filter.Limit < 0 || filter.Limit > 1000 {
		return nil, fmt.Errorf("bunqueue: FailedJobsFilter.Limit must be within 1..1000, got %d", filter.Limit)
	}
	for field, s := range map[string]string{"FailedJobsFilter.Queue": filter.Queue, "FailedJobsFilter.Kind": filter.Kind} {
		if err := checkText(field, s); err != nil {
			return nil, fmt.Errorf("bunqueue: %w", err)
		}
	}
	var out []FailedJob
	err := c.jobSQL().ListFailed(ctx, db, &out, jobsql.FailedFilter{Queue: filter.Queue, Kind: filter.Kind, BeforeID: filter.BeforeID, Limit: filter.Limit})
	if err != nil {
		return nil, fmt.Errorf("bunqueue: list failed jobs: %w", c.notMigrated(err))
	}
	for i := range out { // in UTC, as documented, whatever the driver's location
		out[i].CreatedAt, out[i].FailedAt = out[i].CreatedAt.UTC(), out[i].FailedAt.UTC()
	}
	return out, nil
}

// RetryFailed puts a failed job back in its queue, to run now with a fresh
// set of attempts, and removes it from the failed jobs. It returns the
// job's new id. If a pending job holds the same UniqueKey, that job's id is
// returned and no second one is made.
func (c *Client) RetryFailed(ctx context.Context, id int64) (int64, error) {
	var newID int64
	err := c.inTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		newID, err = c.RetryFailedTx(ctx, tx, id)
		return err
	})
	return newID, err
}

// RetryFailedTx is RetryFailed through db: in a transaction of the app's,
// the job is back if and only if that transaction commits.
func (c *Client) RetryFailedTx(ctx context.Context, db bun.IDB, id int64) (int64, error) {
	var newID int64
	jobs := c.jobSQL()
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var f FailedJob
		err := jobs.LockFailed(ctx, tx, id, &f)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrFailedJobNotFound
		}
		if err != nil {
			return err
		}
		if _, known := c.cfg.JobQueues[f.Queue]; !known {
			return fmt.Errorf("bunqueue: failed job %d belongs to queue %q, which is not in Config.JobQueues", id, f.Queue)
		}
		values := jobs.Values(c.db.QueryGen(), jobsql.NewJob{
			Queue: f.Queue, Kind: f.Kind, Args: f.Args, Metadata: f.Metadata, Priority: f.Priority, MaxAttempts: f.MaxAttempts,
			CreatedAt: f.CreatedAt, UniqueKey: f.UniqueKey, LimitKey: f.LimitKey, TraceContext: f.TraceContext,
		})
		res, err := c.insertJob(ctx, tx, values, f.UniqueKey)
		if err != nil {
			return err
		}
		newID = res.ID
		if err := c.finisher().Revive(ctx, tx, id, newID, res.Duplicate); err != nil {
			return err
		}
		return c.finisher().Requeue(ctx, tx, f.JobID, newID) // its place in its sequence, if it had one
	})
	if err != nil {
		return 0, errorf("bunqueue: retry failed job %d: %w", id, c.notMigrated(err))
	}
	return newID, nil
}

// DeleteFailed removes a failed job for good.
func (c *Client) DeleteFailed(ctx context.Context, id int64) error {
	return c.DeleteFailedTx(ctx, c.db, id)
}

// DeleteFailedTx is DeleteFailed through db: in a transaction of the
// app's, the job is gone if and only if that transaction commits.
func (c *Client) DeleteFailedTx(ctx context.Context, db bun.IDB, id int64) error {
	var gone bool
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) (err error) {
		gone, err = c.finisher().DeleteFailed(ctx, tx, id, false)
		return err
	})
	switch {
	case err != nil:
		return errorf("bunqueue: delete failed job %d: %w", id, c.notMigrated(err))
	case !gone:
		return errorf("bunqueue: delete failed job %d: %w", id, ErrFailedJobNotFound)
	}
	return nil
}
