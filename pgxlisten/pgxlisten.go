// Package pgxlisten lets a bunqueue client on PostgreSQL receive the
// notifications that Enqueue sends from any process, on a pgx connection
// of its own, so that its workers start other processes' jobs at once
// instead of at their next poll.
//
// bunqueue depends on no PostgreSQL driver: this module, with pgx, is
// what an app adds for LISTEN, whatever driver its *bun.DB uses (pgx's
// database/sql driver, or bun's pgdriver):
//
//	listener, err := pgxlisten.New(os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	client, err := bunqueue.NewClient(db, &bunqueue.Config{Listener: listener})
//
// The connection is opened by each call of Listen and closed when it
// returns: it is not one of the *bun.DB's pool, and counts against the
// server's max_connections. It must reach the server, or a pooler in
// session mode: LISTEN does not work through PgBouncer in transaction
// mode.
package pgxlisten

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PingIntervalDefault is how long a connection may stay quiet before
// Listen checks that the server still answers, when PingInterval is zero.
const PingIntervalDefault = 30 * time.Second

// ApplicationName is the application_name of the listening connection,
// unless its configuration sets one: it shows in pg_stat_activity.
const ApplicationName = "bunqueue listen"

// closeTimeout bounds the goodbye to the server when Listen returns.
const closeTimeout = 5 * time.Second

// Listener implements bunqueue.Listener on a pgx connection of its own.
// Create it with New or NewConfig. It is safe for concurrent use: each
// call of Listen has its own connection.
type Listener struct {
	config *pgx.ConnConfig

	// PingInterval is how long the connection may go without a
	// notification before Listen checks that the server still answers
	// (a lost network may otherwise go unnoticed for many minutes, while
	// notifications are missed). Defaults to PingIntervalDefault. Set it
	// before the first Listen.
	PingInterval time.Duration
}

// New returns a Listener that connects with connString, in any form
// pgx.ParseConfig reads (a URL or key=value pairs).
func New(connString string) (*Listener, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgxlisten: %w", err)
	}
	return NewConfig(config), nil
}

// NewConfig returns a Listener that connects with a copy of config, which
// must have been made by pgx.ParseConfig.
func NewConfig(config *pgx.ConnConfig) *Listener {
	config = config.Copy()
	if config.RuntimeParams == nil {
		config.RuntimeParams = map[string]string{}
	}
	if config.RuntimeParams["application_name"] == "" {
		config.RuntimeParams["application_name"] = ApplicationName
	}
	return &Listener{config: config}
}

// Listen opens a connection, runs LISTEN on channel, calls listening,
// then calls notified with the payload of each notification on channel,
// until ctx ends (it returns ctx's error) or the connection fails (it
// returns the error). It implements bunqueue.Listener.
func (l *Listener) Listen(ctx context.Context, channel string, listening func(), notified func(payload string)) error {
	conn, err := pgx.ConnectConfig(ctx, l.config.Copy())
	if err != nil {
		return l.failed(ctx, "connect", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return l.failed(ctx, "LISTEN", err)
	}
	listening()
	ping := l.PingInterval
	if ping <= 0 {
		ping = PingIntervalDefault
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, ping)
		n, err := conn.WaitForNotification(wctx)
		quiet := errors.Is(wctx.Err(), context.DeadlineExceeded)
		cancel()
		if n != nil && n.Channel == channel {
			notified(n.Payload)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case quiet && !conn.IsClosed():
			// A wait that timed out leaves the connection as it was:
			// check that the server is still there.
			pctx, cancel := context.WithTimeout(ctx, ping)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return l.failed(ctx, "check the quiet connection", err)
			}
		default:
			return l.failed(ctx, "wait for notifications", err)
		}
	}
}

// failed returns ctx's error if ctx has ended, or err saying what failed.
func (l *Listener) failed(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("pgxlisten: %s: %w", what, err)
}
