package bunqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/queuesql"
	"github.com/bunqueue/bunqueue/internal/signal"
)

// A paused queue is kept in the bunqueue_queues table (Migrate creates
// it), so that every process sees it: a started client reads the paused
// flags of its queues with its idle probe, one statement per poll
// interval whether or not any queue is idle (see idle.go). A queue it
// finds paused stops handing out rows: the rows its workers already hold
// finish, the rows read but not yet taken are dropped, and its feed reads
// nothing, and is probed for nothing, until the queue is resumed.

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

func (c *Client) setPaused(ctx context.Context, name string, paused bool) error {
	op := "PauseQueue"
	if !paused {
		op = "ResumeQueue"
	}
	if err := checkQueueName(name); err != nil {
		return fmt.Errorf("bunqueue: %s: %w", op, err)
	}
	set := queuesql.New(c.dialect).Pause
	if !paused {
		set = queuesql.New(c.dialect).Resume
	}
	err := c.retry(ctx, func() error { // a conflict, or SQLite's busy lock
		return set(ctx, c.db, name)
	})
	if err != nil {
		if c.dialect.MissingTable(err) {
			return fmt.Errorf("bunqueue: %s(%q): the %s table is missing (run bunqueue.Migrate, or apply bunqueue.MigrationSQL): %w",
				op, name, queuesql.Queues, err)
		}
		return fmt.Errorf("bunqueue: %s(%q): %w", op, name, c.dialect.Advise(err))
	}
	c.applyPause(name, paused) // this process at once
	if c.notifies() {
		// Other processes that listen see it now, the others at their
		// next read of the flags: a lost signal costs that wait.
		kind := signal.KindPause
		if !paused {
			kind = signal.KindResume
		}
		if err := c.signal(ctx, c.db, signal.Message{Kind: kind, Queue: name}); err != nil {
			c.cfg.Logger.WarnContext(ctx, "bunqueue: "+op+": other processes see it at their next poll: notifying them failed", "queue", name, "error", err)
		}
	}
	return nil
}

// pauseSignal returns the subscriber that applies the pause or resume
// signals of other processes. A signal that names no queue (listening
// began again) changes nothing: the flags are read every poll interval.
func (c *Client) pauseSignal(paused bool) func(signal.Message) {
	return func(m signal.Message) {
		if m.Queue != "" {
			c.applyPause(m.Queue, paused)
		}
	}
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
	names, err = queuesql.Paused(ctx, c.db)
	switch {
	case err != nil && c.dialect.MissingTable(err):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	return names, true, nil
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
type pauses struct {
	on      bool // the queues table existed at Start
	names   []string
	runners map[string][]*runner
	every   time.Duration // the shortest poll interval of the queues
	apply   func(name string, paused bool)
}

// newPauses gathers runners by name, and reads their flags once, so that
// a queue paused before Start starts paused. A missing queues table turns
// pauses off, with a line in the log.
func (c *Client) newPauses(ctx context.Context, runners []*runner) (*pauses, error) {
	p := &pauses{runners: map[string][]*runner{}, apply: c.applyPause}
	for _, r := range runners {
		if r.Gate == nil {
			r.Gate = engine.NewGate()
		}
		if p.every == 0 || r.Poll < p.every {
			p.every = r.Poll
		}
		if checkQueueName(r.Name) != nil {
			continue // it cannot be paused
		}
		if p.runners[r.Name] == nil {
			p.names = append(p.names, r.Name)
		}
		p.runners[r.Name] = append(p.runners[r.Name], r)
	}
	if len(p.names) == 0 {
		return p, nil
	}
	paused, found, err := c.readPaused(ctx)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: read the paused queues: %w", err)
	}
	p.on = found
	if !p.on {
		c.cfg.Logger.InfoContext(ctx, "bunqueue: PauseQueue is not seen by this client: the "+queuesql.Queues+
			" table is missing (run bunqueue.Migrate, then start the client again)")
	}
	for _, name := range paused {
		for _, r := range p.runners[name] {
			r.Gate.Set(true)
		}
	}
	return p, nil
}

// Every implements idle.Flags: the flags are read at the shortest poll
// interval of the queues.
func (p *pauses) Every() time.Duration { return p.every }

// Columns implements idle.Flags: the columns that read the flags, in the
// order of p.names.
func (p *pauses) Columns(db bun.IDB) []*bun.SelectQuery {
	cols := make([]*bun.SelectQuery, len(p.names))
	for i, name := range p.names {
		cols[i] = queuesql.PausedColumn(db, name)
	}
	return cols
}

// Apply implements idle.Flags: it pauses or resumes the queues of
// p.names as the flags read by Columns say.
func (p *pauses) Apply(paused []bool) {
	for i, name := range p.names {
		p.apply(name, paused[i])
	}
}

// applyPause pauses or resumes the started runners of the queue named
// name in this process, and logs a change.
func (c *Client) applyPause(name string, paused bool) {
	p := c.pauses.Load()
	if p == nil {
		return
	}
	for _, r := range p.runners[name] {
		if r.Gate.Set(paused) {
			msg := "bunqueue: queue paused"
			if !paused {
				msg = "bunqueue: queue resumed"
			}
			c.cfg.Logger.Info(msg, "queue", name)
		}
	}
}
