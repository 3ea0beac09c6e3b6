package bunqueue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// JobState is where a job is in its life, as JobGet and JobList report
// it and JobListFilter.States selects it. The jobs table keeps a state
// column of two values, waiting (which includes leased) and completed;
// the four waiting states are told apart by the job's other columns, and
// failed jobs are the rows of bunqueue_failed_jobs. A job of a workflow
// that waits for its dependencies is blocked, a third value of the
// column.
type JobState string

const (
	// JobStatePending is a job on its first attempt that is due: it runs
	// when a worker is free.
	JobStatePending JobState = "pending"
	// JobStateScheduled is a job on its first attempt whose RunAt (or
	// Delay, or Snooze) has not come yet.
	JobStateScheduled JobState = "scheduled"
	// JobStateRunning is a job that a lease-mode worker holds, its lease
	// not over. A job that a lock-mode worker runs holds only a row lock,
	// which a read does not see: it reads as pending or retrying, and
	// JobCancel, JobDelete and JobRunNow return ErrJobRunning for it.
	JobStateRunning JobState = "running"
	// JobStateRetrying is a job that was attempted before and waits for
	// its next attempt (its backoff, or a worker), or whose lease ran out.
	JobStateRetrying JobState = "retrying"
	// JobStateBlocked is a job of a workflow (EnqueueWorkflow) that waits
	// for its dependencies to complete: no worker claims it until the
	// last of them completed, and JobRecord.Dependencies says which it
	// waits for. JobCancel and JobDelete apply its dependents' policies;
	// JobRunNow refuses it (ErrJobBlocked).
	JobStateBlocked JobState = "blocked"
	// JobStateCompleted is a job that completed, kept for its queue's
	// Retention, or for its OutputRetention if it recorded an output;
	// otherwise a completed job is deleted.
	JobStateCompleted JobState = "completed"
	// JobStateFailed is a job that used up its attempts or was cancelled
	// (by its worker, with Cancel, or by JobCancel): a row of
	// bunqueue_failed_jobs, which RetryFailed puts back.
	JobStateFailed JobState = "failed"
)

// jobStates are the valid states, in the order of their life.
var jobStates = []JobState{JobStateBlocked, JobStatePending, JobStateScheduled, JobStateRunning, JobStateRetrying, JobStateCompleted, JobStateFailed}

var (
	// ErrJobNotFound is wrapped by the errors of JobGet, JobCancel,
	// JobDelete and JobRunNow for an id that is neither a job's of
	// the jobs table nor a failed job's job id: it never was, or it
	// completed and was not kept, or was deleted.
	ErrJobNotFound = errors.New("bunqueue: no job with that id")
	// ErrJobRunning is wrapped by the errors of JobCancel, JobDelete and
	// JobRunNow for a job that a worker holds: in lock mode, its claim
	// transaction locks it until the job ends, and nothing was changed;
	// JobDelete and JobRunNow also refuse a running lease-mode job, which
	// JobCancel cancels.
	ErrJobRunning = errors.New("bunqueue: the job is running")
	// ErrJobFinished is wrapped by the errors of JobCancel and JobRunNow
	// for a job that completed or failed: there is nothing left to cancel
	// or to run (RetryFailed puts a failed job back).
	ErrJobFinished = errors.New("bunqueue: the job has finished")
	// ErrJobBlocked is wrapped by the error of JobRunNow for a job that
	// waits for its dependencies (JobStateBlocked): it runs once they
	// completed.
	ErrJobBlocked = errors.New("bunqueue: the job waits for its dependencies")
)

// cancelledText is the error a job cancelled by JobCancel is kept with in
// bunqueue_failed_jobs.
const cancelledText = "bunqueue: cancelled with JobCancel"

// JobRecord is a job as JobGet and JobList read it: from the jobs table,
// or, for a failed job, from bunqueue_failed_jobs (Failed).
type JobRecord struct {
	// ID is the job's id in the jobs table; for a failed job, the id it
	// had there (FailedJob.JobID).
	ID    int64
	Queue string
	Kind  string
	State JobState
	// Args are the job's arguments as they were enqueued: JSON, byte for
	// byte.
	Args json.RawMessage
	// Metadata is what EnqueueOpts.Metadata carried, or nil.
	Metadata map[string]string
	Priority int
	// Attempts counts the job's attempts that ended (failed, snoozed
	// ones excepted, or completed) and, in lease mode, the one running;
	// a completed job's are its runs. MaxAttempts is how many it gets.
	Attempts    int
	MaxAttempts int
	// RunAt is when the job is due; for a running lease-mode job, when
	// its lease ends. Zero for a failed job.
	RunAt     time.Time
	CreatedAt time.Time
	// CompletedAt is when a completed job completed; nil otherwise.
	CompletedAt *time.Time
	// LastError is the error of the job's last failed attempt, or "";
	// for a completed job, "" (Errors keeps its failed attempts).
	LastError string
	// Errors are the job's failed attempts, oldest first: the newest
	// AttemptErrorsKept of them, kept while the job waits, after it
	// completed (while it is kept), after it failed, and when
	// RetryFailed puts it back. A job cancelled with JobCancel between
	// attempts gains no entry: its Failed.Error says it was cancelled.
	Errors AttemptErrors
	// UniqueKey is the job's EnqueueOpts.UniqueKey while it waits or runs
	// (a completed job's key is released), or nil.
	UniqueKey *string
	// Output is what the job's worker recorded with RecordOutput, for a
	// completed job (kept for at least its queue's OutputRetention); nil
	// otherwise.
	Output json.RawMessage
	// Failed is the job's row of bunqueue_failed_jobs when State is
	// JobStateFailed (its ID is the one RetryFailed and DeleteFailed
	// take); nil otherwise.
	Failed *FailedJob
	// Dependencies are the jobs a job of a workflow depends on, while it
	// waits or runs (JobGet reads them; JobList leaves them nil): a
	// blocked job waits for those not Done. A job of a sequence has one,
	// the job enqueued before it (Name is the key); one that is failed
	// holds it (DependencyHold) until it is retried or deleted. Nil for
	// other jobs, and once the job finished.
	Dependencies []JobDependency
}

// JobDependency is a dependency of a job, as JobGet reads it.
type JobDependency struct {
	// JobID is the dependency's id, and Name its name in the group (in a
	// sequence, the key).
	JobID int64
	Name  string
	// Policy is what its failure does to the job.
	Policy DependencyPolicy
	// Done is true once it completed (or, under DependencyIgnore, ended
	// without completing).
	Done bool
}

// controlRow is a row of bunqueue_jobs with the columns of
// jobsql.SQL.JobColumns (all of jobRow's but trace_context).
type controlRow struct {
	jobRow
	Output []byte
	Errors AttemptErrors `bun:"attempt_errors"`
	Due    int           // 1 when run_at has come, by the database clock
}

// jobState is the row's JobState, as jobsql's waiting predicates have it.
func (r *controlRow) jobState() JobState {
	switch {
	case r.State == jobsql.Blocked:
		return JobStateBlocked
	case r.State == jobsql.Completed:
		return JobStateCompleted
	case r.LeaseToken != nil && r.Due == 0:
		return JobStateRunning
	case r.Attempts > 0:
		return JobStateRetrying
	case r.Due == 1:
		return JobStatePending
	}
	return JobStateScheduled
}

// record returns the row as a JobRecord, its times in UTC.
func (r *controlRow) record() (JobRecord, error) {
	rec := JobRecord{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, State: r.jobState(), Args: r.Args, Priority: r.Priority,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, RunAt: r.RunAt.UTC(), CreatedAt: r.CreatedAt.UTC(),
		UniqueKey: r.UniqueKey, Output: r.Output, Errors: r.Errors,
	}
	if r.CompletedAt != nil {
		t := r.CompletedAt.UTC()
		rec.CompletedAt = &t
	}
	if r.LastError != nil {
		rec.LastError = *r.LastError
	}
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &rec.Metadata); err != nil {
			return JobRecord{}, fmt.Errorf("bunqueue: decode the metadata of job %d: %w", r.ID, err)
		}
	}
	return rec, nil
}

// failedRecord returns a failed job as a JobRecord.
func failedRecord(f *FailedJob) (JobRecord, error) {
	f.CreatedAt, f.FailedAt = f.CreatedAt.UTC(), f.FailedAt.UTC()
	rec := JobRecord{
		ID: f.JobID, Queue: f.Queue, Kind: f.Kind, State: JobStateFailed, Args: f.Args, Priority: f.Priority,
		Attempts: f.Attempts, MaxAttempts: f.MaxAttempts, CreatedAt: f.CreatedAt, LastError: f.Error,
		UniqueKey: f.UniqueKey, Errors: f.Errors, Failed: f,
	}
	if len(f.Metadata) > 0 {
		if err := json.Unmarshal(f.Metadata, &rec.Metadata); err != nil {
			return JobRecord{}, fmt.Errorf("bunqueue: decode the metadata of failed job %d: %w", f.ID, err)
		}
	}
	return rec, nil
}

// JobGet reads the job id: from the jobs table while it waits, runs or is
// kept completed, and from the failed jobs once it failed or was
// cancelled (its id there is its job id). An id that is neither is an
// error that wraps ErrJobNotFound. The job control calls need the jobs
// tables of schema version 4 (Migrate), which adds the output column and
// the indexes they read through.
func (c *Client) JobGet(ctx context.Context, id int64) (*JobRecord, error) {
	return c.JobGetTx(ctx, c.db, id)
}

// JobGetTx is JobGet through db, a transaction or a connection of the
// app's.
func (c *Client) JobGetTx(ctx context.Context, db bun.IDB, id int64) (*JobRecord, error) {
	rec, err := c.getJob(ctx, db, id)
	if err != nil {
		return nil, errorf("bunqueue: get job %d: %w", id, c.notMigrated(err))
	}
	return &rec, nil
}

// getJob reads the job id from the jobs table, else from the failed
// jobs. A job that moves to the failed jobs in between is found there:
// the move commits its insert there with its delete here.
func (c *Client) getJob(ctx context.Context, db bun.IDB, id int64) (JobRecord, error) {
	var row controlRow
	err := c.jobSQL().GetJob(ctx, db, id, &row)
	if err == nil {
		return c.withDependencies(ctx, db, &row)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return JobRecord{}, err
	}
	return c.getFailed(ctx, db, id)
}

// getFailed reads the failed job whose job id is id.
func (c *Client) getFailed(ctx context.Context, db bun.IDB, id int64) (JobRecord, error) {
	f := new(FailedJob)
	err := c.jobSQL().FailedByJobID(ctx, db, id, f)
	if errors.Is(err, sql.ErrNoRows) {
		return JobRecord{}, ErrJobNotFound
	}
	if err != nil {
		return JobRecord{}, err
	}
	return failedRecord(f)
}

// withDependencies returns the row as a JobRecord with its dependencies,
// read only for a job that has some.
func (c *Client) withDependencies(ctx context.Context, db bun.IDB, row *controlRow) (JobRecord, error) {
	rec, err := row.record()
	if err != nil || row.Flow&jobsql.FlowDependencies == 0 {
		return rec, err
	}
	deps, err := c.jobSQL().DepsOf(ctx, db, row.ID)
	if err != nil {
		return JobRecord{}, err
	}
	for _, d := range deps {
		rec.Dependencies = append(rec.Dependencies, JobDependency{JobID: d.DependsOn, Name: d.Name, Policy: DependencyPolicy(d.Policy), Done: d.Done == 1})
	}
	return rec, nil
}
