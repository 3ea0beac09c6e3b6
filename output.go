package bunqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
// job completed. The job is then kept as completed for at least its
// queue's OutputRetention (a day by default), even where its Retention
// is zero and a job that recorded no output is deleted as it completes.
// Call it from the worker, before it returns; a later call replaces the
// output. It is kept in memory and stored by the statement that
// completes the job (in lock mode, in the job's transaction, with the
// worker's other writes), in place of the DELETE or UPDATE that would
// have completed it: an attempt that does not complete stores nothing. A
// value whose JSON has more than MaxOutputBytes is an error that wraps
// ErrOutputTooLarge; a context that is not a worker's, ErrNotInWorker.
func RecordOutput(ctx context.Context, v any) error {
	o, _ := ctx.Value(outputKey{}).(*jobOutput)
	if o == nil {
		return errorf("bunqueue: RecordOutput: %w", ErrNotInWorker)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bunqueue: RecordOutput: encode the output of job %d as JSON: %w", o.id, err)
	}
	if len(b) > MaxOutputBytes {
		return errorf("bunqueue: RecordOutput: job %d: %w: its JSON has %d bytes, more than MaxOutputBytes (%d)", o.id, ErrOutputTooLarge, len(b), MaxOutputBytes)
	}
	o.record(b)
	return nil
}

// outputKey is the context key of a running job's *jobOutput.
type outputKey struct{}

func withOutput(ctx context.Context, o *jobOutput) context.Context {
	return context.WithValue(ctx, outputKey{}, o)
}

// jobOutput is where RecordOutput puts a running job's output, in
// memory, for the statement that completes the job.
type jobOutput struct {
	id int64
	mu sync.Mutex
	b  []byte
}

func (o *jobOutput) record(b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b = b
}

// recorded returns the output recorded in memory, or nil.
func (o *jobOutput) recorded() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b
}
