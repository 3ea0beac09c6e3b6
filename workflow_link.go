package bunqueue

import (
	"context"
	"fmt"
	"slices"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// How a group of EnqueueWorkflow joins jobs enqueued before it: its
// dependencies by JobID, and a running job's dependents
// (WorkflowOpts.HoldDependents).

// outside locks the group's dependencies by JobID and returns, for each,
// 1 if it is done (completed, or gone, or failed under DependencyIgnore)
// and 0 if the dependent must wait for it. It refuses a job that another
// lease-mode worker holds, whose completion would not see its new
// dependents, and, from a lock-mode worker, one that waits to run: it
// may be of the worker's own batch, whose completion read the job
// before it had dependents.
func (p *workflowPlan) outside(ctx context.Context, sql jobsql.SQL, tx bun.IDB) (map[int64]int, error) {
	var ids []int64
	for _, j := range p.jobs {
		for _, d := range j.DependsOn {
			if d.JobID != 0 {
				ids = append(ids, d.JobID)
			}
		}
	}
	slices.Sort(ids)
	if ids = slices.Compact(ids); len(ids) == 0 {
		return nil, nil
	}
	locked, err := sql.LockFlowJobs(ctx, tx, ids, false)
	if err != nil {
		return nil, err
	}
	done := map[int64]int{}
	for _, j := range locked {
		if done[j.ID], err = p.outsideJob(j); err != nil {
			return nil, err
		}
	}
	return done, p.gone(ctx, sql, tx, ids, done)
}

// outsideJob is whether the dependency j, in the jobs table, is done
// (see outside).
func (p *workflowPlan) outsideJob(j jobsql.FlowJob) (int, error) {
	self := p.self != nil && p.self.row.ID == j.ID
	switch {
	case j.State == jobsql.Completed:
		return 1, nil
	case self || j.State == jobsql.Blocked:
		return 0, nil
	case j.LeaseToken != nil:
		return 0, invalidJob{fmt.Errorf("dependency job %d is held by a lease-mode worker: only the job itself adds dependents to a running job", j.ID)}
	case p.self != nil && !p.self.lease:
		return 0, invalidJob{fmt.Errorf("dependency job %d waits to run: from a lock-mode worker, a dependency by JobID is the job itself, a blocked or a completed job", j.ID)}
	}
	return 0, nil
}

// gone settles the dependencies of ids that are not in the jobs table
// (not in done): a failed one is an error if a job of the group would be
// cancelled by it, else done; one in neither table completed and was
// deleted: done.
func (p *workflowPlan) gone(ctx context.Context, sql jobsql.SQL, tx bun.IDB, ids []int64, done map[int64]int) error {
	var missing []int64
	for _, id := range ids {
		if _, ok := done[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	failed, err := sql.FailedIDs(ctx, tx, missing)
	if err != nil {
		return err
	}
	for _, j := range p.jobs {
		for _, d := range j.DependsOn {
			if slices.Contains(failed, d.JobID) && d.policy(p.policy) == jobsql.PolicyCancel {
				return invalidJob{fmt.Errorf("job %q depends on job %d, which %w", j.Name, d.JobID, errDependencyFailed)}
			}
		}
	}
	for _, id := range missing {
		done[id] = 1
	}
	return nil
}

// link marks the dependencies by JobID that are in the jobs table as
// having dependents (their completion, or failure, then settles the
// group's jobs; a completed one is kept from the cleaner while they
// need it), and, with HoldDependents, makes the running job's
// dependents wait for every job of the group.
func (p *workflowPlan) link(ctx context.Context, sql jobsql.SQL, tx bun.IDB, outside map[int64]int) error {
	var ids []int64
	for id := range outside {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > 0 {
		if err := sql.AddFlow(ctx, tx, ids, jobsql.FlowDependents); err != nil {
			return err
		}
	}
	if !p.hold {
		return nil
	}
	// The dependents are locked before rows are added to them, as every
	// change of a blocked job's dependencies is made: a completion that
	// settles one of them, holding it, then reads all of its rows.
	deps, err := sql.DependentsOn(ctx, tx, []int64{p.self.row.ID})
	if err != nil || len(deps) == 0 {
		return err
	}
	held := make([]int64, len(deps))
	for i, d := range deps {
		held[i] = d.JobID
	}
	slices.Sort(held)
	if _, err := sql.LockFlowJobs(ctx, tx, slices.Compact(held), true); err != nil {
		return err
	}
	names := make([]string, len(p.jobs))
	for i, j := range p.jobs {
		names[i] = j.Name
	}
	_, err = sql.HoldDependents(ctx, tx, p.self.row.ID, p.ids, names)
	return err
}

// noteSelf marks, in memory, the running job that the group depends on
// as having dependents, for the statement that completes it (which the
// claim read before it had them).
func (p *workflowPlan) noteSelf() {
	if p.self == nil {
		return
	}
	for _, j := range p.jobs {
		for _, d := range j.DependsOn {
			if d.JobID == p.self.row.ID {
				p.self.row.Flow |= jobsql.FlowDependents
				return
			}
		}
	}
}
