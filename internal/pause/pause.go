// Package pause keeps a client's view of its queues' pause flags: it
// writes and reads them (through internal/queuesql), and pauses or
// resumes the gates of the started queues (internal/engine) as they say.
//
// A paused queue is kept in the bunqueue_queues table (Migrate creates
// it), so that every process sees it: a started client reads the paused
// flags of its queues with its idle probe, one statement per poll
// interval whether or not any queue is idle (Flags is the idle watcher's
// idle.Flags). A queue it finds paused stops handing out rows: the rows
// its workers already hold finish, the rows read but not yet taken are
// dropped, and its feed reads nothing, and is probed for nothing, until
// the queue is resumed.
package pause

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/queuesql"
	"github.com/bunqueue/bunqueue/internal/signal"
)

// Op names the public call that pauses (PauseQueue) or resumes
// (ResumeQueue) a queue, for its errors and log lines.
func Op(paused bool) string {
	if !paused {
		return "ResumeQueue"
	}
	return "PauseQueue"
}

// Write pauses or resumes the queue named name for every process, through
// db, with retry (a conflict, or SQLite's busy lock). Its errors name the
// call (Op), and say to migrate if the queues table is missing.
func Write(ctx context.Context, db bun.IDB, qs queuesql.SQL, retry func(ctx context.Context, fn func() error) error, name string, paused bool) error {
	d := qs.Dialect()
	set := qs.Pause
	if !paused {
		set = qs.Resume
	}
	err := retry(ctx, func() error { // a conflict, or SQLite's busy lock
		return set(ctx, db, name)
	})
	if err != nil {
		if d.MissingTable(err) {
			return fmt.Errorf("bunqueue: %s(%q): the %s table is missing (run bunqueue.Migrate, or apply bunqueue.MigrationSQL): %w",
				Op(paused), name, qs.Table(), err)
		}
		return fmt.Errorf("bunqueue: %s(%q): %w", Op(paused), name, d.Advise(err))
	}
	return nil
}

// Message returns the signal that tells the processes that listen that
// the queue named name was paused or resumed: they see it at once, the
// others at their next read of the flags.
func Message(name string, paused bool) signal.Message {
	kind := signal.KindPause
	if !paused {
		kind = signal.KindResume
	}
	return signal.Message{Kind: kind, Queue: name}
}

// Read returns the names of the paused queues, sorted; found is false,
// with no error, if the queues table does not exist.
func Read(ctx context.Context, db bun.IDB, qs queuesql.SQL) (names []string, found bool, err error) {
	names, err = qs.Paused(ctx, db)
	switch {
	case err != nil && qs.Dialect().MissingTable(err):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	return names, true, nil
}

// Flags is a started client's view of its queues' pause flags. The idle
// watcher reads them (it is its idle.Flags).
type Flags struct {
	on     bool // the queues table existed at Start
	names  []string
	queues map[string][]*engine.Queue
	every  time.Duration // the shortest poll interval of the queues
	log    *slog.Logger
	sql    queuesql.SQL
}

// New gathers queues by name, and reads their flags once through db, so
// that a queue paused before Start starts paused. It gives each queue a
// Gate if it has none; a queue whose name pausable refuses cannot be
// paused. A missing queues table turns pauses off, with a line in log,
// which also receives each change (see Set).
func New(ctx context.Context, db bun.IDB, qs queuesql.SQL, log *slog.Logger, queues []*engine.Queue, pausable func(name string) bool) (*Flags, error) {
	p := &Flags{queues: map[string][]*engine.Queue{}, log: log, sql: qs}
	for _, q := range queues {
		if q.Gate == nil {
			q.Gate = engine.NewGate()
		}
		if p.every == 0 || q.Poll < p.every {
			p.every = q.Poll
		}
		if !pausable(q.Name) {
			continue // it cannot be paused
		}
		if p.queues[q.Name] == nil {
			p.names = append(p.names, q.Name)
		}
		p.queues[q.Name] = append(p.queues[q.Name], q)
	}
	if len(p.names) == 0 {
		return p, nil
	}
	paused, found, err := Read(ctx, db, qs)
	if err != nil {
		return nil, fmt.Errorf("bunqueue: read the paused queues: %w", err)
	}
	p.on = found
	if !p.on {
		log.InfoContext(ctx, "bunqueue: PauseQueue is not seen by this client: the "+qs.Table()+
			" table is missing (run bunqueue.Migrate, then start the client again)")
	}
	for _, name := range paused {
		for _, q := range p.queues[name] {
			q.Gate.Set(true)
		}
	}
	return p, nil
}

// On reports whether the queues table existed at Start: only then are
// the flags read with the idle watcher's probes.
func (p *Flags) On() bool { return p.on }

// Seen reports whether this process sees the queue named name paused.
func (p *Flags) Seen(name string) bool {
	qs := p.queues[name]
	return len(qs) > 0 && qs[0].Gate.Paused()
}

// Every implements idle.Flags: the flags are read at the shortest poll
// interval of the queues.
func (p *Flags) Every() time.Duration { return p.every }

// Columns implements idle.Flags: the columns that read the flags, in the
// order of p.names.
func (p *Flags) Columns(db bun.IDB) []*bun.SelectQuery {
	cols := make([]*bun.SelectQuery, len(p.names))
	for i, name := range p.names {
		cols[i] = p.sql.PausedColumn(db, name)
	}
	return cols
}

// Apply implements idle.Flags: it pauses or resumes the queues of
// p.names as the flags read by Columns say.
func (p *Flags) Apply(paused []bool) {
	for i, name := range p.names {
		p.Set(name, paused[i])
	}
}

// Set pauses or resumes the started queues named name in this process,
// and logs a change. On nil Flags (a client not started) it does
// nothing.
func (p *Flags) Set(name string, paused bool) {
	if p == nil {
		return
	}
	for _, q := range p.queues[name] {
		if q.Gate.Set(paused) {
			msg := "bunqueue: queue paused"
			if !paused {
				msg = "bunqueue: queue resumed"
			}
			p.log.Info(msg, "queue", name)
		}
	}
}

// Signal returns the subscriber that applies the pause or resume
// signals of other processes. A signal that names no queue (listening
// began again) changes nothing: the flags are read every poll interval.
func (p *Flags) Signal(paused bool) func(signal.Message) {
	return func(m signal.Message) {
		if m.Queue != "" {
			p.Set(m.Queue, paused)
		}
	}
}
