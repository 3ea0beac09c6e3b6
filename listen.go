package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/bunqueue/bunqueue/internal/backoff"
	"github.com/bunqueue/bunqueue/internal/migrate"
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
// their own kinds (internal/signal): c.subscribe(kind, fn) receives them,
// c.signal(ctx, db, msg) sends one in db's transaction, and
// c.sig.hub.Listening() tells whether they are being received.

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

// Waits between two calls of a Listener that failed: from listenRetryMin,
// doubling to listenRetryMax.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// signaling is a client's side of the signals: the channel, once known,
// and the subscribers of what it receives.
type signaling struct {
	hub signal.Hub
	out outbox // signals to send in the background (notify.go)

	mu      sync.Mutex
	channel string // "" until resolved
}

// checkListener refuses a Listener on a server that has no notifications.
func checkListener(db *bun.DB, cfg Config) error {
	if cfg.Listener != nil && db.Dialect().Name() != dialect.PG {
		return fmt.Errorf("bunqueue: Config.Listener is set, but %s has no notifications to listen to: leave it nil, and workers find other processes' rows by polling every PollInterval", db.Dialect().Name())
	}
	return nil
}

// notifies reports whether the client's server carries signals.
func (c *Client) notifies() bool { return c.db.Dialect().Name() == dialect.PG }

// channel returns the client's channel, resolved once through db: the
// schema where the jobs table is found (or, if there is none, the first
// of the search_path), so that the apps of several schemas of one
// database do not wake each other.
func (c *Client) channel(ctx context.Context, db bun.IDB) (string, error) {
	c.sig.mu.Lock()
	ch := c.sig.channel
	c.sig.mu.Unlock()
	if ch != "" {
		return ch, nil
	}
	schema, err := signal.Schema(ctx, db, migrate.JobsTable)
	if err != nil {
		return "", fmt.Errorf("bunqueue: read the schema of the notification channel: %w", err)
	}
	ch = signal.Channel(schema, migrate.JobsTable)
	c.sig.mu.Lock()
	c.sig.channel = ch
	c.sig.mu.Unlock()
	return ch, nil
}

// subscribe calls fn with each signal of kind that the client's Listener
// receives, from now on until the returned function is called; see
// signal.Hub.Subscribe.
func (c *Client) subscribe(kind string, fn func(signal.Message)) (unsubscribe func()) {
	return c.sig.hub.Subscribe(kind, fn)
}

// prepareListening resolves the channel at Start, if the client listens,
// so that a server that cannot tell it fails Start.
func (c *Client) prepareListening(ctx context.Context) error {
	if c.cfg.Listener == nil {
		return nil
	}
	_, err := c.channel(ctx, c.db)
	return err
}

// startListening wakes the feeds of runners (the queues' first, then the
// jobs queues', as Start builds them) by the signals that name them, and
// starts the goroutine that listens, if the client has a Listener.
func (c *Client) startListening(ctx context.Context, runners []*runner) {
	if c.cfg.Listener == nil {
		return
	}
	rows, jobs := map[string][]*runner{}, map[string][]*runner{}
	for i, r := range runners {
		if i < len(c.queues) {
			rows[r.Name] = append(rows[r.Name], r)
		} else {
			jobs[r.Name] = append(jobs[r.Name], r)
		}
	}
	c.subscribe(signal.KindJobs, wakeNamed(jobs))
	c.subscribe(signal.KindRows, wakeNamed(rows))
	c.subscribe(signal.KindPause, c.pauseSignal(true))
	c.subscribe(signal.KindResume, c.pauseSignal(false))
	c.workers.Add(1)
	go c.listen(ctx)
}

// wakeNamed returns a subscriber that wakes the runners of the queue a
// signal names, or all of them for a signal that names none.
func wakeNamed(byName map[string][]*runner) func(signal.Message) {
	return func(m signal.Message) {
		if m.Queue != "" {
			for _, r := range byName[m.Queue] {
				r.Poke()
			}
			return
		}
		for _, rs := range byName {
			for _, r := range rs {
				r.Poke()
			}
		}
	}
}

// listen runs the client's Listener until Stop, calling it again after
// each failure. The first failure of an outage is a warning, and the end
// of the outage a line at INFO; the failures between are at DEBUG.
func (c *Client) listen(ctx context.Context) {
	defer c.workers.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := c.cfg.Logger
	hub := &c.sig.hub
	ch, _ := c.channel(ctx, c.db) // resolved by Start
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
		err := contain(ctx, func() error { return c.cfg.Listener.Listen(ctx, ch, listening, notified) })
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
