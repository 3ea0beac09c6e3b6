package bunqueue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// WorkflowJob is one job of a group that EnqueueWorkflow enqueues: its
// args and options as Enqueue takes them, a name that the other jobs of
// the group depend on it by, and the jobs it depends on.
type WorkflowJob struct {
	// Name names the job in its group: what DependsOn and
	// DependencyOutputs call it. Not empty, unique in the group, at most
	// 255 bytes of UTF-8 without NUL.
	Name string
	Args JobArgs
	// Opts are the job's options, as Enqueue's; nil means defaults. A
	// workflow's jobs have no UniqueKey. RunAt and Delay are the earliest
	// a dependent runs: it runs when both they have come and its
	// dependencies completed.
	Opts *EnqueueOpts
	// DependsOn are the jobs that must complete before this one runs
	// (After builds them from names). Until then the job is blocked
	// (JobStateBlocked): no worker claims it.
	DependsOn []Dependency
}

// Dependency is a job that a WorkflowJob waits for: a job of its group,
// by Name, or a job enqueued before, by JobID (a job that adds jobs to
// its running workflow depends on itself, or on other jobs of the
// workflow, by their ids).
type Dependency struct {
	// Name is a job of the group, by its WorkflowJob.Name. With JobID, it
	// is the dependency's name for DependencyOutputs (default: the id in
	// decimal).
	Name string
	// JobID, when not zero, is a job enqueued before. It must be in the
	// jobs table (waiting, blocked, completed and kept) and not held by
	// another lease-mode worker; a failed one is an error under
	// DependencyCancel, and counts as done under DependencyIgnore; an id
	// found in neither table is taken as a job that completed and was
	// deleted (done, without an output).
	JobID int64
	// Policy is what this dependency's failure does to the job; zero
	// means the group's WorkflowOpts.Policy.
	Policy DependencyPolicy
}

// After returns dependencies on the jobs of the group named names, with
// the group's policy: WorkflowJob{DependsOn: bunqueue.After("fetch",
// "parse")}.
func After(names ...string) []Dependency {
	deps := make([]Dependency, len(names))
	for i, n := range names {
		deps[i] = Dependency{Name: n}
	}
	return deps
}

// DependencyPolicy is what becomes of a job when one of its dependencies
// fails for good, is cancelled (its worker's Cancel, JobCancel) or is
// deleted (JobDelete) before it completed.
type DependencyPolicy int

const (
	// DependencyCancel cancels the dependent: it moves to the failed jobs
	// with an error that names the dependency, in the transaction that
	// ended the dependency, and its own dependents in turn, by their
	// policies. The default.
	DependencyCancel DependencyPolicy = jobsql.PolicyCancel
	// DependencyIgnore counts the dependency as done: the dependent runs
	// once its other dependencies completed (DependencyOutputs has no
	// output of it).
	DependencyIgnore DependencyPolicy = jobsql.PolicyIgnore
	// DependencyHold keeps the dependent waiting: until the failed
	// dependency is retried (RetryFailed), and completes, or is deleted
	// (JobDelete, DeleteFailed). The default of sequences
	// (EnqueueOpts.SequencePolicy); a workflow's dependencies take
	// DependencyCancel or DependencyIgnore.
	DependencyHold DependencyPolicy = jobsql.PolicyHold
)

// WorkflowOpts are the options of a group of EnqueueWorkflow; nil means
// defaults.
type WorkflowOpts struct {
	// Policy is the DependencyPolicy of the group's dependencies that set
	// none. Defaults to DependencyCancel.
	Policy DependencyPolicy
	// HoldDependents, from a worker (ctx is a running job's), makes the
	// jobs that wait for that job wait for every job of the group too:
	// a job fans out, and its dependents fan in after the new jobs. An
	// error that wraps ErrNotInWorker elsewhere.
	HoldDependents bool
}

// EnqueueWorkflow enqueues a group of jobs in which a job may depend on
// others (a DAG), through db, and returns their ids in the order of
// jobs. A job with dependencies is blocked until each of them completed,
// then due; it reads their outputs with DependencyOutputs. A dependency
// that fails for good, is cancelled or deleted cancels its dependents
// (DependencyCancel, cascading) or is ignored (DependencyIgnore). Each
// release and each cancel commits in the transaction that completes,
// fails, cancels or deletes the dependency, in lock and lease mode, in
// every process: exactly once.
//
// Through the app's bun.Tx, the group exists if and only if that
// transaction commits; through a *bun.DB or a bun.Conn, it is inserted
// in a transaction of its own, all or nothing. From a worker, pass the
// job's db (in lock mode its transaction) to add jobs to its running
// workflow with the job's own writes; see WorkflowOpts.HoldDependents.
// A name that is empty or given twice, a dependency on a name outside
// the group, a cycle, or a job Enqueue would refuse is an error that
// names the job and wraps ErrInvalidJob; nothing is inserted.
func (c *Client) EnqueueWorkflow(ctx context.Context, db bun.IDB, jobs []WorkflowJob, opts *WorkflowOpts) ([]int64, error) {
	if opts == nil {
		opts = &WorkflowOpts{}
	}
	plan, err := c.planWorkflow(ctx, db, jobs, opts)
	if err != nil {
		return nil, errorf("bunqueue: EnqueueWorkflow: %w", err)
	}
	params := plan.params()
	ctx, span := c.startSend(ctx, db, params)
	err = inTxOf(ctx, db, func(ctx context.Context, tx bun.IDB) error { return plan.insert(ctx, c, tx) })
	c.endSend(ctx, span, params, false, err)
	if err != nil {
		return nil, errorf("bunqueue: EnqueueWorkflow: %w", c.notMigrated(err))
	}
	plan.noteSelf()
	return plan.ids, c.notifyEnqueued(ctx, db, params, false) // PostgreSQL: wake other processes
}

// inTxOf runs fn in db if it is a transaction (its caller rolls it back
// on an error), else in a transaction of db's own.
func inTxOf(ctx context.Context, db bun.IDB, fn func(ctx context.Context, tx bun.IDB) error) error {
	if tx, ok := db.(bun.Tx); ok {
		return fn(ctx, tx)
	}
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return fn(ctx, tx) })
}

// policy returns the policy of d in a group whose default is group.
func (d Dependency) policy(group DependencyPolicy) int {
	if d.Policy != 0 {
		return int(d.Policy)
	}
	if group != 0 {
		return int(group)
	}
	return int(DependencyCancel)
}

// depName is the name of d for DependencyOutputs.
func (d Dependency) depName() string {
	if d.JobID != 0 && d.Name == "" {
		return strconv.FormatInt(d.JobID, 10)
	}
	return d.Name
}

// checkPolicy returns what is wrong with p, named field.
func checkPolicy(field string, p DependencyPolicy) error {
	if p != 0 && p != DependencyCancel && p != DependencyIgnore {
		return invalidJob{fmt.Errorf("bunqueue: %s is %d, not DependencyCancel or DependencyIgnore", field, p)}
	}
	return nil
}
