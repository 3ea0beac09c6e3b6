package jobsql

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// The statements of workflows: jobs that wait for other jobs (their
// dependencies) to complete, as rows of the job_deps table, and the jobs
// table's flow column, which says which jobs take part, so that every
// other job's completion runs none of these.

// Blocked is the value of the jobs table's state column of a job that
// waits for its dependencies: the claim query (state = Waiting) never
// reads it, so the claim and its index stay as they are. A job is
// Blocked exactly while it has a dependency row that is not done.
const Blocked = 2

// FlowColumn is the jobs table's column of a job's workflow bits.
const FlowColumn = migrate.FlowColumn

// The bits of the flow column: 0 for a job outside any workflow.
const (
	// FlowDependents: other jobs depend on the job; its final state
	// (completed, failed, cancelled, deleted) settles their dependency.
	FlowDependents = 1
	// FlowDependencies: the job depends on others; its dependency rows
	// go when it finishes.
	FlowDependencies = 2
)

// The values of job_deps.policy: what a dependency that failed for good,
// was cancelled or was deleted does to its dependent.
const (
	PolicyCancel = 1 // the dependent is cancelled, and its dependents in turn
	PolicyIgnore = 2 // the dependency counts as done
)

// Dep is a row of the job_deps table.
type Dep struct {
	JobID     int64  `bun:"job_id"`
	DependsOn int64  `bun:"depends_on"`
	Name      string `bun:"name"`
	Policy    int    `bun:"policy"`
	Done      int    `bun:"done"`
}

// FlowJob is a job of a workflow as the statement that locks it reads it.
type FlowJob struct {
	ID         int64   `bun:"id"`
	State      int     `bun:"state"`
	Flow       int     `bun:"flow"`
	LeaseToken *string `bun:"lease_token"`
}

// WithFlow returns values, a Values tuple, with the values of the state
// and flow columns appended, for InsertFlow.
func WithFlow(values string, state, flow int) string {
	return strings.TrimSuffix(values, ")") + ", " + strconv.Itoa(state) + ", " + strconv.Itoa(flow) + ")"
}

// InsertFlow inserts one job of a workflow, its Values tuple with its
// state and flow (WithFlow), and returns its id. A workflow's jobs have
// no unique key.
func (s SQL) InsertFlow(ctx context.Context, db bun.IDB, values string) (int64, error) {
	q := "INSERT INTO " + s.t.Jobs + " " + strings.TrimSuffix(insertColumns, ")") + ", state, " + FlowColumn + ") VALUES " + values
	id, _, err := s.d.InsertID(ctx, db, q)
	return id, err
}

// InsertDeps inserts the dependency rows deps, with one statement.
func (s SQL) InsertDeps(ctx context.Context, db bun.IDB, deps []Dep) error {
	if len(deps) == 0 {
		return nil
	}
	var b strings.Builder
	args := make([]any, 0, 5*len(deps))
	for i, d := range deps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?)")
		args = append(args, d.JobID, d.DependsOn, d.Name, d.Policy, d.Done)
	}
	return exec(ctx, db, "INSERT INTO "+s.t.JobDeps+" (job_id, depends_on, name, policy, done) VALUES "+b.String(), args...)
}

// LockFlowJobs locks the jobs of ids in the jobs table, in the order of
// their ids, waiting for other transactions' locks, and returns those
// there are, with Blocked only those still blocked.
func (s SQL) LockFlowJobs(ctx context.Context, tx bun.IDB, ids []int64, blocked bool) ([]FlowJob, error) {
	q := "SELECT id, state, " + FlowColumn + ", lease_token FROM " + s.byIDs() + " WHERE id IN (?)"
	if blocked {
		q += " AND state = " + strconv.Itoa(Blocked)
	}
	q += " ORDER BY id"
	if lock := s.d.ForUpdate(); lock != "" {
		q += " FOR " + lock
	}
	var jobs []FlowJob
	err := scan(ctx, tx, &jobs, q, bun.List(ids))
	return jobs, err
}

// FailedIDs returns which of ids are the job ids of failed jobs.
func (s SQL) FailedIDs(ctx context.Context, db bun.IDB, ids []int64) ([]int64, error) {
	var failed []int64
	err := scan(ctx, db, &failed, "SELECT DISTINCT job_id FROM "+s.t.FailedJobs+" WHERE job_id IN (?)", bun.List(ids))
	return failed, err
}

// AddFlow sets the bits flow in the flow column of the jobs of ids.
func (s SQL) AddFlow(ctx context.Context, db bun.IDB, ids []int64, flow int) error {
	return exec(ctx, db, "UPDATE "+s.byIDs()+" SET "+FlowColumn+" = "+FlowColumn+" | ? WHERE id IN (?)", flow, bun.List(ids))
}

// DependentsOn returns the dependency rows, not done, on the jobs of
// ids, which tx holds locked: no other transaction adds or settles rows
// on them meanwhile. It is a plain read, which locks nothing: a locking
// read of the index would wait for the rows that other completions
// delete or settle at once, and deadlock with them. At READ COMMITTED
// (the engine's transactions) it sees every committed row.
func (s SQL) DependentsOn(ctx context.Context, db bun.IDB, ids []int64) ([]Dep, error) {
	var deps []Dep
	err := scan(ctx, db, &deps, "SELECT job_id, depends_on, name, policy, done FROM "+s.t.JobDeps+
		" WHERE depends_on IN (?) AND done = 0 ORDER BY job_id, depends_on", bun.List(ids))
	return deps, err
}

// DepsOf returns the dependency rows of the job id, by dependency.
func (s SQL) DepsOf(ctx context.Context, db bun.IDB, id int64) ([]Dep, error) {
	var deps []Dep
	err := scan(ctx, db, &deps, "SELECT job_id, depends_on, name, policy, done FROM "+s.t.JobDeps+
		" WHERE job_id = ? ORDER BY depends_on", id)
	return deps, err
}

// MarkDone marks done the dependency rows on the jobs of ids, which
// completed.
func (s SQL) MarkDone(ctx context.Context, db bun.IDB, ids []int64) error {
	return exec(ctx, db, "UPDATE "+s.t.JobDeps+" SET done = 1 WHERE depends_on IN (?) AND done = 0", bun.List(ids))
}

// DeleteDepsOn deletes the dependency rows on the jobs of ids, which
// ended without completing (or were deleted); with hold, it keeps those
// of PolicyHold, whose dependents keep waiting for the failed jobs.
func (s SQL) DeleteDepsOn(ctx context.Context, db bun.IDB, ids []int64, hold bool) error {
	q := "DELETE FROM " + s.t.JobDeps + " WHERE depends_on IN (?)"
	if hold {
		q += " AND policy <> " + strconv.Itoa(PolicyHold)
	}
	return exec(ctx, db, q, bun.List(ids))
}

// DeleteDepsOf deletes the dependency rows of the jobs of ids, which
// finished: their dependencies are needed no longer.
func (s SQL) DeleteDepsOf(ctx context.Context, db bun.IDB, ids []int64) error {
	return exec(ctx, db, "DELETE FROM "+s.t.JobDeps+" WHERE job_id IN (?)", bun.List(ids))
}

// ReleaseBlocked makes due those of the blocked jobs of ids, which tx holds
// locked, that have no dependency left that is not done, and returns
// their ids. The read runs after the locks were taken, a plain read that
// at READ COMMITTED sees what committed before, so that of two
// transactions that each settle one dependency of a job, the second
// (which waited for the first's lock on the job) sees the first's:
// exactly one releases it.
func (s SQL) ReleaseBlocked(ctx context.Context, tx bun.IDB, ids []int64) ([]int64, error) {
	var waiting []int64
	if err := scan(ctx, tx, &waiting, "SELECT job_id FROM "+s.t.JobDeps+" WHERE job_id IN (?) AND done = 0", bun.List(ids)); err != nil {
		return nil, err
	}
	free := make([]int64, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(waiting, id) {
			free = append(free, id)
		}
	}
	if len(free) == 0 {
		return nil, nil
	}
	return free, exec(ctx, tx, "UPDATE "+s.byIDs()+" SET state = ? WHERE id IN (?) AND state = ?", Waiting, bun.List(free), Blocked)
}

// CancelBlocked moves the blocked jobs of ids, which tx holds locked, to
// the failed jobs, with errorText as their error, in two statements.
func (s SQL) CancelBlocked(ctx context.Context, tx bun.IDB, ids []int64, errorText string) error {
	err := exec(ctx, tx, `INSERT INTO `+s.t.FailedJobs+`
	(job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, limit_key, error, created_at, failed_at, trace_context, `+AttemptErrorsColumn+`)
SELECT id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, limit_key, ?, created_at, `+s.d.Now()+`, trace_context, `+AttemptErrorsColumn+`
FROM `+s.byIDs()+` WHERE id IN (?) AND state = ?`, errorText, bun.List(ids), Blocked)
	if err != nil {
		return err
	}
	return exec(ctx, tx, "DELETE FROM "+s.t.Jobs+" WHERE id IN (?) AND state = ?", bun.List(ids), Blocked)
}

// HoldDependents makes the jobs that wait for the job id (its dependency
// rows not done) wait for each of the jobs of also too, named names[i],
// with the same policy, and returns how many rows it added.
func (s SQL) HoldDependents(ctx context.Context, db bun.IDB, id int64, also []int64, names []string) (int, error) {
	n := 0
	for i, a := range also {
		r, err := db.NewRaw("INSERT INTO "+s.t.JobDeps+" (job_id, depends_on, name, policy, done) SELECT job_id, ?, ?, policy, 0 FROM "+
			s.t.JobDeps+" WHERE depends_on = ? AND done = 0", a, names[i], id).Exec(ctx)
		if err != nil {
			return n, err
		}
		k, _ := r.RowsAffected()
		n += int(k)
	}
	return n, nil
}

// Output is a dependency's output, as Outputs reads it.
type Output struct {
	Name   string `bun:"name"`
	JobID  int64  `bun:"depends_on"`
	Output []byte `bun:"output"`
}

// Outputs returns the outputs of the dependencies of the job id that
// completed and recorded one, by their names.
func (s SQL) Outputs(ctx context.Context, db bun.IDB, id int64) ([]Output, error) {
	var out []Output
	err := scan(ctx, db, &out, "SELECT d.name, d.depends_on, j.output FROM "+s.t.JobDeps+" d JOIN "+s.t.Jobs+
		" j ON j.id = d.depends_on WHERE d.job_id = ? AND d.done = 1 AND j.output IS NOT NULL ORDER BY d.depends_on", id)
	return out, err
}
