package bunqueue

import (
	"context"
	"fmt"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/pause"
	"github.com/bunqueue/bunqueue/internal/queuesql"
)

// A paused queue is kept in the bunqueue_queues table, for every process:
// the mechanics of the flags are in internal/pause.

// PauseQueue pauses the queue named name, a table queue's or a jobs
// queue's, for every process on the database: within a poll interval of
// its return, no client starts another of its rows or jobs; the ones in
// flight finish. Pausing a paused queue changes nothing. A queue that no
// client runs may be paused: it starts paused. Jobs may still be
// enqueued to a paused queue; they wait.
//
// It needs the bunqueue_queues table of schema version 3 (Migrate); a
// client started before the table existed does not see pauses until it
// is started again.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, true)
}

// ResumeQueue resumes the queue named name, paused by PauseQueue in any
// process: within a poll interval of its return, the clients that run it
// hand out its rows again. Resuming a queue that is not paused changes
// nothing.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, false)
}

// setPaused writes the flag of the queue named name, applies it in this
// process at once, and tells the other processes.
func (c *Client) setPaused(ctx context.Context, name string, paused bool) error {
	op := pause.Op(paused)
	if err := checkQueueName(name); err != nil {
		return fmt.Errorf("bunqueue: %s: %w", op, err)
	}
	retry := func(ctx context.Context, fn func() error) error { return c.retry(ctx, fn) }
	if err := pause.Write(ctx, c.db, queuesql.New(c.dialect, c.tables), retry, name, paused); err != nil {
		return err
	}
	c.pauses.Load().Set(name, paused) // this process at once
	if c.notifies() {
		// Other processes that listen see it now, the others at their
		// next read of the flags: a lost signal costs that wait.
		if err := c.sig.Send(ctx, c.db, pause.Message(name, paused)); err != nil {
			c.cfg.Logger.WarnContext(ctx, "bunqueue: "+op+": other processes see it at their next poll: notifying them failed", "queue", name, "error", err)
		}
	}
	return nil
}

// PausedQueues returns the names of the paused queues, sorted, whichever
// processes run them; none if the bunqueue_queues table is missing.
func (c *Client) PausedQueues(ctx context.Context) ([]string, error) {
	names, _, err := c.readPaused(ctx)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: PausedQueues: %w", c.dialect.Advise(err))
	}
	return names, nil
}

// readPaused returns the names of the paused queues, sorted; found is
// false, with no error, if the queues table does not exist.
func (c *Client) readPaused(ctx context.Context) (names []string, found bool, err error) {
	return pause.Read(ctx, c.db, queuesql.New(c.dialect, c.tables))
}

// checkQueueName returns what makes name unfit for the queues table.
func checkQueueName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("the queue name must have 1 to 128 bytes, got %q", name)
	}
	return checkText("the queue name", name)
}

// pauses is a started client's view of its queues' pause flags. The idle
// watcher reads them (it is its idle.Flags).
type pauses = pause.Flags

// newPauses gathers runners by name, and reads their flags once, so that
// a queue paused before Start starts paused. A missing queues table turns
// pauses off, with a line in the log.
func (c *Client) newPauses(ctx context.Context, runners []*runner) (*pauses, error) {
	queues := make([]*engine.Queue, len(runners))
	for i, r := range runners {
		queues[i] = &r.Queue
	}
	pausable := func(name string) bool { return checkQueueName(name) == nil }
	return pause.New(ctx, c.db, queuesql.New(c.dialect, c.tables), c.cfg.Logger, queues, pausable)
}
