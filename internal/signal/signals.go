package signal

import (
	"context"
	"fmt"
	"sync"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// Signals is a client's side of the signals: the channel, once known,
// the subscribers of what it receives (its Hub), and the signals waiting
// to be sent in the background (SendLater). Its zero value is ready to
// use.
type Signals struct {
	Hub
	// Tables are the client's tables, whose jobs table names the channel;
	// the zero value stands for tables.Default.
	Tables tables.Names
	out    outbox // signals to send in the background (see SendLater)

	mu      sync.Mutex
	channel string // "" until resolved
}

// Channel returns the client's channel, resolved once through db: the
// schema where the jobs table is found (or, if there is none, the first
// of the search_path), so that the apps of several schemas of one
// database do not wake each other.
func (s *Signals) Channel(ctx context.Context, db bun.IDB) (string, error) {
	s.mu.Lock()
	ch := s.channel
	s.mu.Unlock()
	if ch != "" {
		return ch, nil
	}
	t := s.Tables
	if t.Jobs == "" {
		t = tables.Default
	}
	schema, err := Schema(ctx, db, t.Jobs)
	if err != nil {
		return "", fmt.Errorf("bunqueue: read the schema of the notification channel: %w", err)
	}
	ch = Channel(schema, t.Bare(tables.Jobs))
	s.mu.Lock()
	s.channel = ch
	s.mu.Unlock()
	return ch, nil
}

// Send sends msgs on the client's channel through db, in one statement:
// within a transaction they are delivered when it commits (once each,
// however often they were sent in it), and never if it rolls back.
func (s *Signals) Send(ctx context.Context, db bun.IDB, msgs ...Message) error {
	ch, err := s.Channel(ctx, db)
	if err != nil {
		return err
	}
	return Send(ctx, db, ch, msgs...)
}

// Wake wakes queues by the signals of kind that name them, or all of
// them for a signal that names none, from now on.
func (s *Signals) Wake(kind string, queues []*engine.Queue) {
	byName := map[string][]*engine.Queue{}
	for _, q := range queues {
		byName[q.Name] = append(byName[q.Name], q)
	}
	s.Subscribe(kind, wakeNamed(byName))
}

// wakeNamed returns a subscriber that wakes the queues a signal names,
// or all of them for a signal that names none.
func wakeNamed(byName map[string][]*engine.Queue) func(Message) {
	return func(m Message) {
		if m.Queue != "" {
			for _, q := range byName[m.Queue] {
				q.Poke()
			}
			return
		}
		for _, qs := range byName {
			for _, q := range qs {
				q.Poke()
			}
		}
	}
}
