package bunqueue

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/uptrace/bun"
)

// purgeBatch is how many completed jobs one transaction of the cleaner
// deletes at most.
const purgeBatch = 1000

// keeping is how long the completed jobs of some jobs queues are kept:
// every one for all (the longer of their Retention and OutputRetention),
// and one that recorded no output for bare, when that is shorter and not
// zero.
type keeping struct {
	queues []string
	all    time.Duration
	bare   time.Duration
}

// keepings returns the jobs queues of the client grouped by how long they
// keep their completed jobs, so that the queues that agree share the
// cleaner's statements.
func (c *Client) keepings() []keeping {
	by := map[[2]time.Duration][]string{}
	for name, q := range c.cfg.JobQueues {
		k := [2]time.Duration{max(q.Retention, q.OutputRetention), 0}
		if q.Retention > 0 && q.Retention < q.OutputRetention {
			// A zero Retention keeps no job without an output: those
			// went as they completed.
			k[1] = q.Retention
		}
		by[k] = append(by[k], name)
	}
	var out []keeping
	for k, queues := range by {
		slices.Sort(queues)
		out = append(out, keeping{queues: queues, all: k[0], bare: k[1]})
	}
	slices.SortFunc(out, func(a, b keeping) int { return strings.Compare(a.queues[0], b.queues[0]) })
	return out
}

// cleanEvery is how often the cleaner looks for completed jobs that are
// due: half the shortest time they are kept, from 1s to 1 minute.
func cleanEvery(keeps []keeping) time.Duration {
	every := time.Minute
	for _, k := range keeps {
		shortest := k.all
		if k.bare > 0 {
			shortest = k.bare
		}
		every = min(every, shortest/2)
	}
	return max(every, time.Second)
}

// clean deletes, until Stop, the completed jobs of the jobs queues this
// client runs once their queue keeps them no longer (see keeping), in
// batches by primary key. It leaves the completed jobs of other queues
// alone: the clients that run those queues delete them.
func (c *Client) clean(ctx context.Context) {
	defer c.workers.Done()
	keeps := c.keepings()
	every := cleanEvery(keeps)
	for {
		t := time.NewTimer(backoff.Jitter(every, 0.1))
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		for _, k := range keeps {
			if err := c.purgeKept(ctx, k); err != nil {
				if ctx.Err() == nil {
					c.cfg.Logger.ErrorContext(ctx, "bunqueue: delete completed jobs", "queues", k.queues, "error", err)
				}
				break
			}
		}
	}
}

// purgeKept deletes the completed jobs of k's queues that are due: those
// older than k.all, then those without an output older than k.bare.
func (c *Client) purgeKept(ctx context.Context, k keeping) error {
	if err := c.purgeAll(ctx, k.queues, k.all, false); err != nil || k.bare == 0 {
		return err
	}
	return c.purgeAll(ctx, k.queues, k.bare, true)
}

// purgeAll deletes, in batches, the completed jobs of queues older than
// age (with bare, those that recorded no output), until none is left.
func (c *Client) purgeAll(ctx context.Context, queues []string, age time.Duration, bare bool) error {
	for {
		n, err := c.purge(ctx, queues, age, bare, purgeBatch)
		if err != nil || n < purgeBatch {
			return err
		}
	}
}

// purge deletes, in a transaction, up to limit of the completed jobs of
// queues older than age (with bare, those that recorded no output), and
// returns how many were due.
func (c *Client) purge(ctx context.Context, queues []string, age time.Duration, bare bool, limit int) (n int, err error) {
	err = c.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) (err error) {
		n, err = c.finisher().Purge(ctx, tx, queues, age, bare, limit)
		return err
	})
	return n, err
}
