package bunqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/uptrace/bun"
)

// MaxOutputBytes is the most bytes of JSON that RecordOutput stores.
const MaxOutputBytes = 64 << 10

var (
	// ErrOutputTooLarge is wrapped by the error of RecordOutput for a
	// value whose JSON has more than MaxOutputBytes; nothing was recorded.
	ErrOutputTooLarge = errors.New("bunqueue: the job's output is too large")
	// ErrNotInWorker is wrapped by the error of RecordOutput called with a
	// context that is not a running job's.
	ErrNotInWorker = errors.New("bunqueue: not called with the context of a running job's worker")
)

// RecordOutput records v, as JSON, as the output of the job whose
// worker's context ctx is: JobGet returns it in JobRecord.Output once the
// job completed, while Config.Retention keeps it (without Retention a
// completed job is deleted, and its output checked and dropped). Call it
// from the worker, before it returns; a later call replaces the output.
// In lock mode it is written at once through the job's transaction, so
// it commits with the completion, and is undone with the worker's other
// writes if the attempt fails; in lease mode it is kept in memory and
// stored by the completion's UPDATE. An attempt that does not complete
// keeps no output. A value whose JSON has more than MaxOutputBytes is an
// error that wraps ErrOutputTooLarge; a context that is not a worker's,
// ErrNotInWorker.
func RecordOutput(ctx context.Context, v any) error {
	o, _ := ctx.Value(outputKey{}).(*jobOutput)
	if o == nil {
		return fmt.Errorf("bunqueue: RecordOutput: %w", ErrNotInWorker)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bunqueue: RecordOutput: encode the output of job %d as JSON: %w", o.id, err)
	}
	if len(b) > MaxOutputBytes {
		return fmt.Errorf("bunqueue: RecordOutput: job %d: %w: its JSON has %d bytes, more than MaxOutputBytes (%d)", o.id, ErrOutputTooLarge, len(b), MaxOutputBytes)
	}
	return o.record(ctx, b)
}

// outputKey is the context key of a running job's *jobOutput.
type outputKey struct{}

func withOutput(ctx context.Context, o *jobOutput) context.Context {
	return context.WithValue(ctx, outputKey{}, o)
}

// jobOutput is where RecordOutput puts a running job's output: through
// tx, the job's transaction, in lock mode; in memory, for the
// completion, in lease mode (tx nil).
type jobOutput struct {
	c  *Client
	id int64
	tx bun.Tx
	mu sync.Mutex
	b  []byte
}

func (o *jobOutput) record(ctx context.Context, b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tx.Tx == nil || o.c.cfg.Retention <= 0 { // lease mode, or dropped with the job
		o.b = b
		return nil
	}
	if err := o.c.jobSQL().SetOutput(ctx, o.tx, o.id, b); err != nil {
		return fmt.Errorf("bunqueue: RecordOutput: job %d: %w", o.id, err)
	}
	return nil
}

// recorded returns the output recorded in memory, or nil.
func (o *jobOutput) recorded() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b
}
