package lease

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/telemetry"
	"github.com/uptrace/bun"
)

// A lease-mode job that succeeds is completed by a write of its own, on
// a database far away a round trip and a commit for each job. The jobs
// of a batch that run quickly (under BatchTarget/4 each, on average)
// instead wait for their completions to be written together, in one
// transaction: the batch's end, or the next job's start once the first
// of them has waited BatchTarget, writes them. Their leases are kept
// alive until then, as a running job's are; a process that dies before
// runs them again once their leases run out, as it would a job that was
// running. Jobs slower than that, and jobs that fail, are written at
// once, as before.

// leaseCompletions are the jobs of a lease-mode batch that succeeded and
// wait to be completed together.
type leaseCompletions struct {
	l      *Runner
	keeper *Keeper
	token  string

	jobs  []*leasedJob
	ends  []func(ierr error) // each job's spans' end
	since time.Time          // when the first of jobs succeeded

	ran    int           // the batch's jobs run so far
	worked time.Duration // and the time they ran, in all
}

// takes counts a job that ran for took, and reports whether it may wait
// to be completed with others: the batch's jobs so far ran quickly.
func (d *leaseCompletions) takes(took time.Duration) bool {
	d.ran++
	d.worked += took
	return d.worked/time.Duration(d.ran) < d.l.Env.BatchTarget/4
}

// add keeps j, which succeeded, until flush; end ends its spans.
func (d *leaseCompletions) add(j *leasedJob, end func(ierr error)) {
	if len(d.jobs) == 0 {
		d.since = time.Now()
	}
	d.jobs = append(d.jobs, j)
	d.ends = append(d.ends, end)
}

// due reports whether the first waiting job has waited BatchTarget.
func (d *leaseCompletions) due() bool {
	return len(d.jobs) > 0 && time.Since(d.since) >= d.l.Env.BatchTarget
}

// flush completes the waiting jobs that are still leased with the
// batch's token, in one transaction (retried on conflicts, and written
// even when ctx has ended), and records what became of each in res.
func (d *leaseCompletions) flush(ctx context.Context, res *engine.Result) {
	if len(d.jobs) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claim.FinishTimeout)
	defer cancel()
	ours, err := d.complete(fctx)
	for i, j := range d.jobs {
		lost := d.keeper.Finish(j.row.ID)
		var ierr error
		switch {
		case err != nil:
			ierr = j.failure(fmt.Errorf("bunqueue: finishing the job failed (its lease will expire and it will run again): %w", err))
		case ours[j.row.ID]:
			j.it.Outcome = telemetry.OutcomeCompleted
		default:
			ierr = j.leaseGone(lost, nil)
		}
		d.l.record(res, j.row.ID, ierr, d.ends[i])
	}
	d.jobs, d.ends = d.jobs[:0], d.ends[:0]
}

// complete completes those of the waiting jobs still leased with the
// token, with the outputs their workers recorded, in one transaction; it
// returns their ids.
func (d *leaseCompletions) complete(ctx context.Context) (map[int64]bool, error) {
	c := d.l.Env
	ids := make([]int64, len(d.jobs))
	outputs := map[int64][]byte{}
	for i, j := range d.jobs {
		ids[i] = j.row.ID
		if out := j.output; out != nil {
			outputs[j.row.ID] = out
		}
	}
	ours := map[int64]bool{}
	err := c.Retry(ctx, func() error {
		clear(ours)
		return c.DB.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
			held, err := c.Finisher().CompleteLeased(ctx, tx, ids, d.token, outputs)
			for _, id := range held {
				ours[id] = true
			}
			return err
		})
	})
	return ours, err
}
