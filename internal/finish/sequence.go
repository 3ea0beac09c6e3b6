package finish

import (
	"context"
	"slices"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// What a job's final state means for its sequence, in the transaction
// that makes it final, before its successor's row is read: the key's
// sequences row, if the job is its tail, is taken first, which waits for
// an enqueue of the key under way, so that the successor it adds is seen.

// settleSequence settles the sequence of the job id (of flow flow), which
// ended as how says: deleted, its key's row goes (nothing is left to
// wait for); failed or cancelled, the row is kept, locked, and the next
// job of the key waits for the failed one (PolicyHold).
func (f Finisher) settleSequence(ctx context.Context, tx bun.Tx, id int64, flow int, how string) error {
	if flow&jobsql.FlowSequence == 0 {
		return nil
	}
	if how == EndDeleted {
		return f.sql.EndSequences(ctx, tx, []int64{id})
	}
	return f.sql.HoldSequence(ctx, tx, id)
}

// sequenced returns the jobs of flows that belong to a sequence, in the
// order of their ids.
func sequenced(flows map[int64]int) []int64 {
	var ids []int64
	for id, fl := range flows {
		if fl&jobsql.FlowSequence != 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ReleaseHeld releases what the failed job whose id in the jobs table was
// jobID held, now that it is deleted from the failed jobs: its key's
// sequences row if it was the tail, and the successors that waited for
// it (PolicyHold), which run. A failed job that held nothing costs two
// statements that find nothing.
func (f Finisher) ReleaseHeld(ctx context.Context, tx bun.Tx, jobID int64) error {
	return f.settleEnded(ctx, tx, jobID, jobsql.FlowSequence, EndDeleted)
}

// Requeue makes the job newID, the failed job oldID enqueued again
// (RetryFailed), take oldID's place in its sequence, if it had one: the
// tail of its key, and the job its held successor waits for.
func (f Finisher) Requeue(ctx context.Context, tx bun.Tx, oldID, newID int64) error {
	moved, err := f.sql.MoveSequence(ctx, tx, oldID, newID)
	if err != nil || !moved {
		return err
	}
	return f.sql.AddFlow(ctx, tx, []int64{newID}, jobsql.FlowSequence|jobsql.FlowDependents)
}
