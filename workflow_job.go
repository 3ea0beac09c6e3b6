package bunqueue

import (
	"context"
	"encoding/json"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// A running job of a workflow, as its worker's context carries it: for
// DependencyOutputs, and for EnqueueWorkflow from a worker.

// runningJob is the job whose worker runs with a context, and how to
// read through it: in lock mode db is the job's transaction, in lease
// mode the client's pool.
type runningJob struct {
	c     *Client
	db    bun.IDB
	row   *jobRow
	lease bool
}

// runningKey is the context key of a worker's *runningJob.
type runningKey struct{}

func withRunning(ctx context.Context, r *runningJob) context.Context {
	return context.WithValue(ctx, runningKey{}, r)
}

// runningFrom returns the running job of a worker's context; nil for
// another context.
func runningFrom(ctx context.Context) *runningJob {
	r, _ := ctx.Value(runningKey{}).(*runningJob)
	return r
}

// DependencyOutputs returns the outputs that the dependencies of the job
// whose worker's context ctx is recorded (RecordOutput), by their names
// (Dependency.Name; for a dependency by JobID without one, the id in
// decimal). A dependency that recorded none, that was ignored after it
// failed (DependencyIgnore), or that completed and was deleted has no
// entry; a job without dependencies gets an empty map. A completed
// dependency is kept while a dependent that has not finished needs it:
// the cleaner of Retention and OutputRetention leaves it until then. In
// lock mode it reads through the job's transaction; a context that is
// not a worker's is an error that wraps ErrNotInWorker.
func DependencyOutputs(ctx context.Context) (map[string]json.RawMessage, error) {
	r := runningFrom(ctx)
	if r == nil {
		return nil, errorf("bunqueue: DependencyOutputs: %w", ErrNotInWorker)
	}
	out := map[string]json.RawMessage{}
	if r.row.Flow&jobsql.FlowDependencies == 0 {
		return out, nil
	}
	rows, err := r.c.jobSQL().Outputs(ctx, r.db, r.row.ID)
	if err != nil {
		return nil, errorf("bunqueue: DependencyOutputs of job %d: %w", r.row.ID, r.c.notMigrated(err))
	}
	for _, o := range rows {
		out[o.Name] = o.Output
	}
	return out, nil
}
