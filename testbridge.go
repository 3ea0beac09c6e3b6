package bunqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/testbridge"
)

// The test helpers of package bunqueuetest run a job through a client's
// own worker path, which the client does not export: this file lends it
// to them through internal/testbridge, which only this module can import.
// A method on Client would do as well, but would be a part of the API
// that only tests use.
func init() {
	testbridge.DB = func(client any) *bun.DB { return client.(*Client).db }
	testbridge.WorkJob = func(ctx context.Context, client any, id int64) (testbridge.Result, error) {
		return client.(*Client).workJob(ctx, id)
	}
}

// workJob runs the pending job id as a worker of its queue runs it, in
// the calling goroutine: claimed, worked, and completed or failed by the
// queue's runner, in the queue's mode, with its hooks and Timeout.
func (c *Client) workJob(ctx context.Context, id int64) (testbridge.Result, error) {
	var rows []jobRow
	if err := c.jobSQL().GetPending(ctx, c.db, &rows, id); err != nil {
		return testbridge.Result{}, fmt.Errorf("bunqueue: read job %d: %w", id, c.notMigrated(err))
	}
	if len(rows) == 0 {
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d is not pending: it completed, failed, or was never enqueued (or its transaction has not committed)", id)
	}
	row := rows[0]
	qc, known := c.cfg.JobQueues[row.Queue]
	if !known {
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d is in queue %q, which is not in the client's Config.JobQueues", id, row.Queue)
	}
	c.mu.Lock()
	run := c.kinds[row.Kind]
	c.mu.Unlock()
	if run == nil {
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d is of kind %q, and no worker for it was added to the client: add one with AddWorker", id, row.Kind)
	}
	r := c.jobRunner(row.Queue, qc)
	if err := r.slots.Ensure(ctx); err != nil { // as Start does: a GlobalLimit's slots
		return testbridge.Result{}, err
	}
	if err := r.rate.Ensure(ctx); err != nil { // and a RateLimit's
		return testbridge.Result{}, err
	}
	res := r.RunBatch(ctx, nil, 1, []engine.Key{{ID: fmt.Sprintf("id=%d", id), Vals: []any{id}}})
	return c.workResult(ctx, &row, res)
}

// workResult is what became of the job of row, which RunBatch ran with
// the result res.
func (c *Client) workResult(ctx context.Context, row *jobRow, res engine.Result) (testbridge.Result, error) {
	attempt := row.Attempts + 1
	var ie *ItemError
	switch {
	case res.Err != nil:
		return testbridge.Result{}, res.Err
	case res.Done == 1:
		return testbridge.Result{Outcome: outcomeCompleted, Attempt: attempt}, nil
	case len(res.ItemErrs) > 0 && errors.As(res.ItemErrs[0], &ie):
		if !ie.Recorded || ie.job == nil || ie.job.outcome == outcomeReleased {
			return testbridge.Result{}, errorf("bunqueue: job %d ran, but what became of it was not recorded; it is still in its queue: %w", row.ID, ie)
		}
		return testbridge.Result{Outcome: ie.job.outcome, Err: ie.Err, RetryIn: ie.job.after, Attempt: ie.job.attempt}, nil
	case res.Claimed > 0:
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d was claimed but neither completed nor failed", row.ID)
	}
	due, pending, err := c.jobSQL().Due(ctx, c.db, row.ID)
	switch {
	case err != nil:
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d was not claimed; reading why failed: %w", row.ID, err)
	case !pending:
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d was not claimed: it is no longer pending (did a started client's workers run it?)", row.ID)
	case !due:
		return testbridge.Result{}, fmt.Errorf("bunqueue: job %d was not claimed: it is not due until %s (or is leased by a worker until then)", row.ID, row.RunAt.UTC().Format("2006-01-02 15:04:05.999999 MST"))
	}
	return testbridge.Result{}, fmt.Errorf("bunqueue: job %d was not claimed: another transaction holds it locked (a started client's worker?)", row.ID)
}
