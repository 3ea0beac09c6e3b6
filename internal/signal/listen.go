package signal

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// Waits between two calls of a Listener that failed: from listenRetryMin,
// doubling to listenRetryMax.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// Listener receives the notifications of a channel: the app's
// bunqueue.Listener (Config.Listener), which documents the contract.
type Listener interface {
	// Listen runs LISTEN on channel, calls listening once it has taken
	// effect, then notified with the payload of each notification, until
	// ctx ends or the connection fails.
	Listen(ctx context.Context, channel string, listening func(), notified func(payload string)) error
}

// ListenEnv is what Listen needs of its client.
type ListenEnv struct {
	// DB resolves the channel (see Channel), which Start has resolved.
	DB bun.IDB
	// Listener is the client's Config.Listener.
	Listener Listener
	// Logger receives the failures and the returns of listening.
	Logger *slog.Logger
	// Contain runs the Listener, the app's code, so that a panic in it
	// fails the call, not the goroutine.
	Contain func(ctx context.Context, fn func() error) error
	// Stopping is closed when the client stops: listen no more.
	Stopping <-chan struct{}
}

// Listen runs the client's Listener until Stopping is closed or ctx
// ends, calling it again after each failure, and hands what it receives
// to the Hub. The first failure of an outage is a warning, and the end
// of the outage a line at INFO; the failures between are at DEBUG.
func (s *Signals) Listen(ctx context.Context, env ListenEnv) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-env.Stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := env.Logger
	hub := &s.Hub
	ch, _ := s.Channel(ctx, env.DB) // resolved by Start
	failures := 0
	for {
		var began atomic.Bool
		outage := failures // read by listening, which may run on the Listener's goroutine
		listening := func() {
			began.Store(true)
			if outage > 0 {
				log.InfoContext(ctx, "bunqueue: listening for notifications again", "channel", ch, "failures", outage)
			}
			hub.Began()
		}
		notified := func(payload string) {
			if err := hub.Deliver(payload); err != nil {
				log.DebugContext(ctx, "bunqueue: a notification bunqueue cannot read", "channel", ch, "error", err)
			}
		}
		// The Listener is the app's code: a panic in it is its failure.
		err := env.Contain(ctx, func() error { return env.Listener.Listen(ctx, ch, listening, notified) })
		hub.Ended()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("Listen returned before its context ended")
		}
		if began.Load() {
			failures = 0
		}
		failures++
		wait := backoff.Jitter(backoff.Exponential(failures, listenRetryMin, listenRetryMax), 0.2)
		if failures == 1 {
			log.WarnContext(ctx, "bunqueue: listening for notifications failed: workers find other processes' jobs by polling every PollInterval until it is back",
				"channel", ch, "error", err, "retry_in", wait)
		} else {
			log.DebugContext(ctx, "bunqueue: listening for notifications failed again", "channel", ch, "error", err, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
