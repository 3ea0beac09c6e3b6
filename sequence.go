package bunqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// Sequences: the jobs enqueued with the same EnqueueOpts.Sequence run one
// at a time, in enqueue order. Each waits for the one enqueued before it
// (its key's tail) as a workflow's dependent waits for its dependency,
// and is released by the same road, in the transaction that completes
// it. See docs/workflows.md#sequences.

// insertSequenced inserts the job of values, whose opts name a sequence,
// in a transaction (db's, or one of its own): it locks the key's row of
// the sequences table, so that enqueues of the key wait for each other
// and each new job waits for the one before it, and makes the job the
// key's tail. A rolled-back enqueue leaves the row as it was.
func (c *Client) insertSequenced(ctx context.Context, db bun.IDB, values string, opts *EnqueueOpts) (res EnqueueResult, err error) {
	policy := int(DependencyHold)
	if opts.SequencePolicy != 0 {
		policy = int(opts.SequencePolicy)
	}
	jobs := c.jobSQL()
	err = inTxOf(ctx, db, func(ctx context.Context, tx bun.IDB) error {
		tail, err := jobs.LockSequence(ctx, tx, opts.Sequence)
		if err != nil {
			return err
		}
		wait, err := c.waitsFor(ctx, tx, tail, policy)
		if err != nil {
			return err
		}
		state, flow := jobsql.Waiting, jobsql.FlowSequence
		if wait {
			state, flow = jobsql.Blocked, flow|jobsql.FlowDependencies
		}
		if res.ID, err = jobs.InsertFlow(ctx, tx, jobsql.WithFlow(values, state, flow)); err != nil {
			return err
		}
		if wait {
			dep := jobsql.Dep{JobID: res.ID, DependsOn: tail, Name: opts.Sequence, Policy: policy}
			if err := jobs.InsertDeps(ctx, tx, []jobsql.Dep{dep}); err != nil {
				return err
			}
		}
		return jobs.SetTail(ctx, tx, opts.Sequence, res.ID)
	})
	return res, err
}

// waitsFor reports whether a new job of a sequence whose tail is the job
// tail (0: none) waits for it: while it has not completed, and, under
// DependencyHold, while it is among the failed jobs.
func (c *Client) waitsFor(ctx context.Context, tx bun.IDB, tail int64, policy int) (bool, error) {
	if tail == 0 {
		return false, nil
	}
	state, err := c.jobSQL().TailState(ctx, tx, tail)
	if err != nil {
		return false, err
	}
	return state == jobsql.TailPending || (state == jobsql.TailFailed && policy == jobsql.PolicyHold), nil
}

// checkSequence returns what makes o's Sequence and SequencePolicy unfit,
// naming the field; nil if nothing.
func (o *EnqueueOpts) checkSequence() error {
	switch {
	case o.Sequence == "" && o.SequencePolicy != 0:
		return errors.New("EnqueueOpts.SequencePolicy is set without a Sequence")
	case o.Sequence == "":
		return nil
	case len(o.Sequence) > 255:
		return fmt.Errorf("EnqueueOpts.Sequence must have at most 255 bytes, got %d", len(o.Sequence))
	case o.UniqueKey != "":
		return errors.New("set EnqueueOpts.Sequence or EnqueueOpts.UniqueKey, not both")
	case o.SequencePolicy != 0 && o.SequencePolicy != DependencyHold && o.SequencePolicy != DependencyIgnore:
		return fmt.Errorf("EnqueueOpts.SequencePolicy is %d, not DependencyHold or DependencyIgnore", o.SequencePolicy)
	}
	return checkText("EnqueueOpts.Sequence", o.Sequence)
}
