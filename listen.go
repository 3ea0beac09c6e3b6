package bunqueue

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/signal"
)

// Signals between processes, on PostgreSQL: Enqueue sends a notification
// in the job's transaction (see notify.go), which the server delivers when
// it commits; a client with a Config.Listener receives them on a
// connection of its own and wakes the feeds of the queues they name, as
// the QueryHook does for the commits of its own process. Polling goes on
// as before, at PollInterval: it finds what no notification announces
// (jobs that become due, retries, rows the app wrote without
// Client.Notify) and what was sent while the listener was down.
//
// Within the package, other features may send and receive signals of
// their own kinds (internal/signal): c.sig.Subscribe(kind, fn) receives
// them, c.sig.Send(ctx, db, msg) sends one in db's transaction, and
// c.sig.Listening() tells whether they are being received.

// Listener receives the notifications of a PostgreSQL channel, for
// Config.Listener. The module github.com/bunqueue/bunqueue/pgxlisten
// has one that listens on a pgx connection of its own; bunqueue itself
// depends on no PostgreSQL driver.
type Listener interface {
	// Listen runs LISTEN on channel (an identifier to quote as it is),
	// calls listening once it has taken effect, then notified with the
	// payload of each notification on channel, in the order they come,
	// until ctx ends or the connection fails. It returns nil or ctx's
	// error once ctx has ended, and an error otherwise: the client then
	// calls it again, after a wait that grows while it keeps failing. It
	// calls listening and notified on one goroutine at a time, and they do
	// not block. It must return soon after ctx ends: Stop waits for it.
	Listen(ctx context.Context, channel string, listening func(), notified func(payload string)) error
}

// ListenerFunc adapts a function to a Listener.
type ListenerFunc func(ctx context.Context, channel string, listening func(), notified func(payload string)) error

// Listen calls f.
func (f ListenerFunc) Listen(ctx context.Context, channel string, listening func(), notified func(payload string)) error {
	return f(ctx, channel, listening, notified)
}

// signaling is a client's side of the signals: the channel, once known,
// and the subscribers of what it receives (internal/signal).
type signaling = signal.Signals

// checkListener refuses a Listener on a server that has no notifications.
func checkListener(db *bun.DB, cfg Config) error {
	if cfg.Listener != nil && db.Dialect().Name() != dialect.PG {
		return fmt.Errorf("bunqueue: Config.Listener is set, but %s has no notifications to listen to: leave it nil, and workers find other processes' rows by polling every PollInterval", db.Dialect().Name())
	}
	return nil
}

// notifies reports whether the client's server carries signals.
func (c *Client) notifies() bool { return c.db.Dialect().Name() == dialect.PG }

// prepareListening resolves the channel at Start, if the client listens,
// so that a server that cannot tell it fails Start.
func (c *Client) prepareListening(ctx context.Context) error {
	if c.cfg.Listener == nil {
		return nil
	}
	_, err := c.sig.Channel(ctx, c.db)
	return err
}

// startListening wakes the feeds of runners (the queues' first, then the
// jobs queues', as Start builds them) by the signals that name them, and
// starts the goroutine that listens, if the client has a Listener.
func (c *Client) startListening(ctx context.Context, runners []*runner) {
	if c.cfg.Listener == nil {
		return
	}
	var rows, jobs []*engine.Queue
	for i, r := range runners {
		if i < len(c.queues) {
			rows = append(rows, &r.Queue)
		} else {
			jobs = append(jobs, &r.Queue)
		}
	}
	c.sig.Wake(signal.KindJobs, jobs)
	c.sig.Wake(signal.KindRows, rows)
	c.sig.Subscribe(signal.KindPause, c.pauses.Load().Signal(true))
	c.sig.Subscribe(signal.KindResume, c.pauses.Load().Signal(false))
	env := signal.ListenEnv{DB: c.db, Listener: c.cfg.Listener, Logger: c.cfg.Logger, Contain: contain, Stopping: c.stopping}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		c.sig.Listen(ctx, env)
	}()
}
