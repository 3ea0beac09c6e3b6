package signal

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// sendTimeout bounds a background send of signals.
const sendTimeout = 10 * time.Second

// outbox holds the signals waiting to be sent in the background, and
// whether a goroutine is sending them.
type outbox struct {
	mu      sync.Mutex
	pending []Message
	sending bool
	failing bool // the last send failed, and was logged
}

// SendLater sends msgs from the pool db, in the background: one
// goroutine at a time, which sends all that came while it sent the last,
// as one statement, and ends when none is left (so a client that is
// never started or stopped leaves none behind). A signal not yet sent
// when the process exits is lost, as a wake-up: polling finds the jobs.
// Failures go to log.
func (s *Signals) SendLater(db *bun.DB, log *slog.Logger, msgs []Message) {
	o := &s.out
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range msgs {
		if !slices.Contains(o.pending, m) {
			o.pending = append(o.pending, m)
		}
	}
	if !o.sending {
		o.sending = true
		go s.sendPending(db, log)
	}
}

// sendPending sends the outbox's signals until it is empty.
func (s *Signals) sendPending(db *bun.DB, log *slog.Logger) {
	o := &s.out
	for {
		o.mu.Lock()
		msgs := o.pending
		o.pending = nil
		if len(msgs) == 0 {
			o.sending = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		err := s.Send(ctx, db, msgs...)
		cancel()
		switch {
		case err != nil && !o.failing:
			log.Warn("bunqueue: the jobs were enqueued, but notifying other processes failed: their workers find them when they poll", "error", err)
		case err != nil:
			log.Debug("bunqueue: notifying other processes failed again", "error", err)
		}
		o.failing = err != nil
	}
}
