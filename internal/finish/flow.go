package finish

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// What a job's final state means for the jobs that depend on it
// (workflows), written in the transaction that makes the state final:
// the release of a dependent whose last dependency completed, and the
// policy of one whose dependency failed for good, was cancelled or was
// deleted, commit with that state or not at all, in both modes and in
// every process. Jobs outside any workflow (flow 0) never get here.

// How a job ended without completing, as its dependents' cancel errors
// say it.
const (
	EndFailed    = "failed for good"
	EndCancelled = "was cancelled"
	EndDeleted   = "was deleted"
)

// settleCompleted settles what the completion of the jobs of flows (by
// id, their flow) implies: the dependency rows of those that had
// dependencies go (they need them no longer); those on which others
// depend are marked done, and each of their dependents whose every
// dependency is done is made due. The dependents are locked before their
// rows change, in the order of their ids, so that of two completions
// that each settle one of a job's dependencies, the second waits for the
// first and sees its change: the job is released once.
func (f Finisher) settleCompleted(ctx context.Context, tx bun.Tx, flows map[int64]int) error {
	own, done := byFlow(flows)
	if seq := sequenced(flows); len(seq) > 0 {
		if err := f.sql.EndSequences(ctx, tx, seq); err != nil {
			return err
		}
	}
	if len(own) > 0 {
		if err := f.sql.DeleteDepsOf(ctx, tx, own); err != nil {
			return err
		}
	}
	if len(done) == 0 {
		return nil
	}
	deps, err := f.sql.DependentsOn(ctx, tx, done)
	if err != nil || len(deps) == 0 {
		return err
	}
	locked, err := f.sql.LockFlowJobs(ctx, tx, dependents(deps), true)
	if err != nil {
		return err
	}
	if err := f.sql.MarkDone(ctx, tx, done); err != nil || len(locked) == 0 {
		return err
	}
	_, err = f.sql.ReleaseBlocked(ctx, tx, flowIDs(locked))
	return err
}

// settleEnded applies, after the job id (of flow flow) ended without
// completing as how says (EndFailed, ...), its dependents' policies:
// those that ignore it go on as if it completed (made due if it was
// their last), the others are cancelled (moved to the failed jobs, with
// an error that names it), and their own dependents in turn, to the end
// of the cascade, in this transaction. Its own dependency rows go.
func (f Finisher) settleEnded(ctx context.Context, tx bun.Tx, id int64, flow int, how string) error {
	if err := f.settleSequence(ctx, tx, id, flow, how); err != nil {
		return err
	}
	if flow&jobsql.FlowDependencies != 0 {
		if err := f.sql.DeleteDepsOf(ctx, tx, []int64{id}); err != nil {
			return err
		}
	}
	ended := []int64{id}
	for len(ended) > 0 {
		next, err := f.endOnce(ctx, tx, ended, how)
		if err != nil {
			return err
		}
		ended, how = next, EndCancelled
	}
	return nil
}

// endOnce is one step of settleEnded's cascade: it applies the policies
// of the dependents of the jobs of ended, and returns the cancelled ones
// that have dependents of their own.
func (f Finisher) endOnce(ctx context.Context, tx bun.Tx, ended []int64, how string) ([]int64, error) {
	deps, err := f.sql.DependentsOn(ctx, tx, ended)
	if err != nil {
		return nil, err
	}
	var locked []jobsql.FlowJob
	if len(deps) > 0 {
		if locked, err = f.sql.LockFlowJobs(ctx, tx, dependents(deps), true); err != nil {
			return nil, err
		}
	}
	hold := how != EndDeleted // a held successor waits for a failed or cancelled job, not a deleted one
	if err := f.sql.DeleteDepsOn(ctx, tx, ended, hold); err != nil || len(locked) == 0 {
		return nil, err
	}
	cause := map[int64]jobsql.Dep{} // a cancelled dependent: the first dependency that cancels it
	var ignore []int64
	for _, j := range locked {
		if i := slices.IndexFunc(deps, func(d jobsql.Dep) bool { return d.JobID == j.ID && d.Policy == jobsql.PolicyCancel }); i >= 0 {
			cause[j.ID] = deps[i]
			continue
		}
		ignore = append(ignore, j.ID) // ReleaseBlocked leaves one that a held row still blocks
	}
	if len(ignore) > 0 {
		if _, err := f.sql.ReleaseBlocked(ctx, tx, ignore); err != nil {
			return nil, err
		}
	}
	return f.cancelDependents(ctx, tx, locked, cause, how)
}

// cancelDependents cancels the dependents of cause (by id, the
// dependency that cancels it), which tx holds locked, grouped by that
// dependency so that each one's error names it, and drops their
// dependency rows. It returns those that have dependents of their own.
func (f Finisher) cancelDependents(ctx context.Context, tx bun.Tx, locked []jobsql.FlowJob, cause map[int64]jobsql.Dep, how string) ([]int64, error) {
	if len(cause) == 0 {
		return nil, nil
	}
	byDep := map[int64][]int64{}
	names := map[int64]string{}
	var all, next []int64
	for _, j := range locked {
		d, ok := cause[j.ID]
		if !ok {
			continue
		}
		byDep[d.DependsOn] = append(byDep[d.DependsOn], j.ID)
		names[d.DependsOn] = d.Name
		all = append(all, j.ID)
		if j.Flow&jobsql.FlowDependents != 0 {
			next = append(next, j.ID)
		}
	}
	for _, dep := range slices.Sorted(maps.Keys(byDep)) {
		text := fmt.Sprintf("bunqueue: cancelled: job %d (%q), which it depends on, %s", dep, names[dep], how)
		if err := f.sql.CancelBlocked(ctx, tx, byDep[dep], text); err != nil {
			return nil, err
		}
	}
	return next, f.sql.DeleteDepsOf(ctx, tx, all)
}

// byFlow splits the jobs of flows into those that have dependencies
// (own) and those that have or may have dependents (done: a job of a
// sequence may get its successor at any time), each in the order of
// their ids.
func byFlow(flows map[int64]int) (own, done []int64) {
	for id, fl := range flows {
		if fl&jobsql.FlowDependencies != 0 {
			own = append(own, id)
		}
		if fl&(jobsql.FlowDependents|jobsql.FlowSequence) != 0 {
			done = append(done, id)
		}
	}
	slices.Sort(own)
	slices.Sort(done)
	return own, done
}

// dependents returns the dependents of deps, each once, in order.
func dependents(deps []jobsql.Dep) []int64 {
	ids := make([]int64, 0, len(deps))
	for _, d := range deps {
		ids = append(ids, d.JobID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// flowIDs returns the ids of jobs.
func flowIDs(jobs []jobsql.FlowJob) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}
