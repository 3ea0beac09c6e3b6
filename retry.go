package bunqueue

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// retry runs fn, and runs it again after a deadlock or a lock wait timeout
// (the server has rolled the transaction back, or should be asked to),
// after a jittered exponential wait, up to txAttempts times in all. Each
// retry is counted in bunqueue.transaction.retries.
func (c *Client) retry(ctx context.Context, fn func() error, attrs ...metric.AddOption) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !c.retryable(err) || attempt == txAttempts {
			return err
		}
		c.cfg.Logger.DebugContext(ctx, "bunqueue: retrying transaction", "attempt", attempt, "error", err)
		c.tel.CountTxRetry(ctx, attrs...)
		if !backoff.Sleep(ctx, backoff.Jitter(backoff.Exponential(attempt, 5*time.Millisecond, 500*time.Millisecond), 0.5)) {
			return err
		}
	}
}

// txAttempts bounds how often one batch is retried after a deadlock or a
// lock wait timeout before the error is returned.
const txAttempts = 8
