package bunqueue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
)

// Defaults used where a Config or QueueConfig field is left zero.
const (
	// WorkersDefault is the number of worker goroutines per queue.
	WorkersDefault = 1
	// BatchSizeDefault is how many rows one transaction claims.
	BatchSizeDefault = 1
	// PollIntervalDefault is how long an idle worker waits before it looks
	// for work again. Each wait is drawn from [¾·PollInterval, PollInterval].
	PollIntervalDefault = time.Second
	// CooldownDefault is how long this process leaves a row alone after it
	// failed without its failure being recorded on the row (OnError nil or
	// failing, or a handler that did not take the row out of the queue).
	// The wait doubles on each further failure, up to CooldownMax.
	CooldownDefault = time.Second
	// CooldownMax caps the doubling cooldown of a failing row, unless
	// QueueConfig.Cooldown is longer.
	CooldownMax = 10 * time.Minute
	// CooldownLimit is how many rows one queue keeps cooling down; past it,
	// the row whose wait ends first is dropped from the list.
	CooldownLimit = 1000
)

// Config configures a Client. A nil *Config, and its zero value, mean
// defaults.
type Config struct {
	// Logger receives what workers cannot return to a caller: handler
	// errors, rows that did not leave their queue, lost connections.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// PollInterval is used by queues whose QueueConfig.PollInterval is
	// zero. Defaults to PollIntervalDefault.
	PollInterval time.Duration
}

// QueueConfig configures a Queue. A nil *QueueConfig, and its zero value,
// mean defaults.
type QueueConfig[T any] struct {
	// Workers is the number of goroutines that claim and process rows of
	// this queue in this process. Each holds one database connection while
	// it processes a batch. Defaults to WorkersDefault.
	Workers int

	// BatchSize is the most rows one transaction locks and processes. With
	// more than one (or with OnError set), each row runs in its own
	// SAVEPOINT, so a failing row does not undo the others, and the batch
	// commits once. Defaults to BatchSizeDefault.
	BatchSize int

	// PollInterval is how long an idle worker waits before it looks again.
	// Defaults to Config.PollInterval, then PollIntervalDefault.
	PollInterval time.Duration

	// Cooldown is the first wait of a row that failed without leaving the
	// queue; it doubles on each failure up to CooldownMax (or Cooldown
	// itself, if longer), ±10% jitter. Defaults to
	// CooldownDefault.
	Cooldown time.Duration

	// OnError is called when the handler returns an error or panics, after
	// the handler's writes were undone and while the row is still locked,
	// with the row as it was claimed. Record the failure on the row through
	// tx (an attempts count, a retry_at in the future, a failed status) so
	// that it leaves the query for a while; those writes commit with the
	// batch. If OnError is nil or returns an error, its writes are undone
	// too, the row stays in the queue, and this process cools it down.
	OnError func(ctx context.Context, tx bun.Tx, item *T, err error) error
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.PollInterval == 0 {
		out.PollInterval = PollIntervalDefault
	}
	return out
}

func (c Config) validate() error {
	if c.PollInterval < 0 {
		return fmt.Errorf("bunqueue: Config.PollInterval must not be negative, got %s", c.PollInterval)
	}
	return nil
}

func (c *QueueConfig[T]) withDefaults(client Config) QueueConfig[T] {
	var out QueueConfig[T]
	if c != nil {
		out = *c
	}
	if out.Workers == 0 {
		out.Workers = WorkersDefault
	}
	if out.BatchSize == 0 {
		out.BatchSize = BatchSizeDefault
	}
	if out.PollInterval == 0 {
		out.PollInterval = client.PollInterval
	}
	if out.Cooldown == 0 {
		out.Cooldown = CooldownDefault
	}
	return out
}

func (c *QueueConfig[T]) validate(queue string) error {
	if c == nil {
		return nil
	}
	field := func(name string, v any) error {
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.%s must not be negative, got %v", queue, name, v)
	}
	switch {
	case c.Workers < 0:
		return field("Workers", c.Workers)
	case c.BatchSize < 0:
		return field("BatchSize", c.BatchSize)
	case c.PollInterval < 0:
		return field("PollInterval", c.PollInterval)
	case c.Cooldown < 0:
		return field("Cooldown", c.Cooldown)
	}
	return nil
}
