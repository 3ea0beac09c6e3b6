package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// workflowPlan is a group of EnqueueWorkflow, checked, with each job's
// VALUES tuple rendered: what its insert needs, decided before any
// statement runs.
type workflowPlan struct {
	jobs   []WorkflowJob
	values []string
	index  map[string]int // a job's place in jobs, by name
	policy DependencyPolicy
	self   *runningJob // the worker's job, for HoldDependents and dependencies on itself; nil elsewhere
	hold   bool
	ids    []int64 // the inserted jobs' ids, in jobs' order
}

// planWorkflow checks the group and renders its rows.
func (c *Client) planWorkflow(ctx context.Context, db bun.IDB, jobs []WorkflowJob, opts *WorkflowOpts) (*workflowPlan, error) {
	p := &workflowPlan{jobs: jobs, index: map[string]int{}, policy: opts.Policy, self: runningFrom(ctx), hold: opts.HoldDependents}
	if err := checkPolicy("WorkflowOpts.Policy", opts.Policy); err != nil {
		return nil, err
	}
	if p.hold && p.self == nil {
		return nil, fmt.Errorf("WorkflowOpts.HoldDependents: %w", ErrNotInWorker)
	}
	for i, j := range jobs {
		if err := p.checkJob(i, j); err != nil {
			return nil, err
		}
		p.index[j.Name] = i
	}
	if err := p.checkDeps(); err != nil {
		return nil, err
	}
	trace := c.tel.Inject(ctx)
	for _, j := range jobs {
		v, err := c.jobValues(ctx, db, EnqueueParams{Args: j.Args, Opts: j.Opts}, trace)
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", j.Name, err)
		}
		p.values = append(p.values, v)
	}
	return p, nil
}

// checkJob returns what is wrong with the job i of the group, alone.
func (p *workflowPlan) checkJob(i int, j WorkflowJob) error {
	bad := func(format string, a ...any) error {
		return invalidJob{fmt.Errorf("job %d (%q): "+format, append([]any{i, j.Name}, a...)...)}
	}
	if err := checkText("WorkflowJob.Name", j.Name); err != nil || j.Name == "" || len(j.Name) > 255 {
		return bad("WorkflowJob.Name must be 1 to 255 bytes of UTF-8 without NUL")
	}
	if _, dup := p.index[j.Name]; dup {
		return bad("the name is given to two jobs of the group")
	}
	if j.Opts != nil && j.Opts.UniqueKey != "" {
		return bad("a workflow's jobs have no UniqueKey")
	}
	if j.Opts != nil && j.Opts.Sequence != "" {
		return bad("a workflow's jobs have no Sequence")
	}
	for k, d := range j.DependsOn {
		if err := checkPolicy(fmt.Sprintf("DependsOn[%d].Policy", k), d.Policy); err != nil {
			return bad("%w", err)
		}
		if d.JobID < 0 || (d.JobID == 0 && d.Name == "") {
			return bad("DependsOn[%d] names no job: give a Name of the group or a JobID", k)
		}
	}
	return nil
}

// checkDeps returns an error that names a dependency on a name outside
// the group, or a cycle.
func (p *workflowPlan) checkDeps() error {
	for _, j := range p.jobs {
		seen := map[Dependency]bool{}
		for _, d := range j.DependsOn {
			if _, ok := p.index[d.Name]; d.JobID == 0 && !ok {
				return invalidJob{fmt.Errorf("job %q depends on %q, which is not a job of the group", j.Name, d.Name)}
			}
			once := Dependency{Name: d.Name}
			if d.JobID != 0 {
				once = Dependency{JobID: d.JobID}
			}
			if seen[once] {
				return invalidJob{fmt.Errorf("job %q depends on %q twice", j.Name, d.depName())}
			}
			seen[once] = true
		}
	}
	state := make([]int, len(p.jobs)) // 0 unseen, 1 on the path, 2 done
	var path []string
	var visit func(i int) error
	visit = func(i int) error {
		state[i], path = 1, append(path, p.jobs[i].Name)
		for _, d := range p.jobs[i].DependsOn {
			k, ok := p.index[d.Name]
			if d.JobID != 0 || !ok || state[k] == 2 {
				continue
			}
			if state[k] == 1 {
				cycle := append(slices.Clone(path[slices.Index(path, d.Name):]), d.Name)
				return invalidJob{fmt.Errorf("job %q is in a cycle of dependencies: %s", d.Name, strings.Join(quoteAll(cycle), " -> "))}
			}
			if err := visit(k); err != nil {
				return err
			}
		}
		state[i], path = 2, path[:len(path)-1]
		return nil
	}
	for i := range p.jobs {
		if state[i] == 0 {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// quoteAll returns each of names quoted.
func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return q
}

// params are the group's jobs as EnqueueParams, for the send span and
// the notifications.
func (p *workflowPlan) params() []EnqueueParams {
	out := make([]EnqueueParams, len(p.jobs))
	for i, j := range p.jobs {
		out[i] = EnqueueParams{Args: j.Args, Opts: j.Opts}
	}
	return out
}

// errDependencyFailed is the error of a dependency by JobID, under
// DependencyCancel, on a job that failed or was cancelled.
var errDependencyFailed = errors.New("failed for good or was cancelled: its dependents would be cancelled at once (DependencyIgnore goes on without it)")

// insert inserts the group in tx: it locks the dependencies given by
// JobID (before any row is written, in the order of their ids), inserts
// each job blocked or due with its flow, marks the dependencies by JobID
// as having dependents (and holds the running job's dependents), then
// inserts the group's dependency rows.
func (p *workflowPlan) insert(ctx context.Context, c *Client, tx bun.IDB) error {
	sql := c.jobSQL()
	outside, err := p.outside(ctx, sql, tx)
	if err != nil {
		return err
	}
	dependents := map[string]bool{}
	for _, j := range p.jobs {
		for _, d := range j.DependsOn {
			if d.JobID == 0 {
				dependents[d.Name] = true
			}
		}
	}
	p.ids = make([]int64, len(p.jobs))
	for i, j := range p.jobs {
		state, flow := p.shape(j, dependents[j.Name], outside)
		if p.ids[i], err = sql.InsertFlow(ctx, tx, jobsql.WithFlow(p.values[i], state, flow)); err != nil {
			return fmt.Errorf("job %q: %w", j.Name, err)
		}
	}
	if err := p.link(ctx, sql, tx, outside); err != nil {
		return err
	}
	return sql.InsertDeps(ctx, tx, p.depRows(outside)) // after link: the running job's dependents are not the group's own jobs
}

// shape is the state and flow a job of the group is inserted with:
// blocked while one of its dependencies is not done.
func (p *workflowPlan) shape(j WorkflowJob, hasDependents bool, outside map[int64]int) (state, flow int) {
	state = jobsql.Waiting
	if hasDependents || p.hold {
		flow |= jobsql.FlowDependents
	}
	for _, d := range j.DependsOn {
		flow |= jobsql.FlowDependencies
		if d.JobID == 0 || outside[d.JobID] == 0 {
			state = jobsql.Blocked
		}
	}
	return state, flow
}

// depRows are the group's dependency rows: on a job of the group, not
// done; on one outside it, done when outside says so.
func (p *workflowPlan) depRows(outside map[int64]int) []jobsql.Dep {
	var rows []jobsql.Dep
	for i, j := range p.jobs {
		for _, d := range j.DependsOn {
			row := jobsql.Dep{JobID: p.ids[i], Name: d.depName(), Policy: d.policy(p.policy)}
			if d.JobID != 0 {
				row.DependsOn, row.Done = d.JobID, outside[d.JobID]
			} else {
				row.DependsOn = p.ids[p.index[d.Name]]
			}
			rows = append(rows, row)
		}
	}
	return rows
}
