package dashboard

import (
	"context"
	"fmt"
	"time"
)

// FailedRowsShown is how many of a FailedRows function's rows the queue
// page lists; it says how many more there were.
const FailedRowsShown = 100

// FailedRow is a row of a table queue that failed for good, as the app's
// Options.FailedRows function reads it from its own table.
type FailedRow struct {
	// Key names the row by its primary key, as bunqueue names it in
	// Failure.Key and ItemError.Key: "id=42", or "tenant=1,id=42" for a
	// composite key.
	Key string `json:"key"`
	// Error is why it failed, as the app recorded it (untrusted: the page
	// shows it as text).
	Error string `json:"error"`
	// FailedAt is when it failed, or the zero time if the app does not
	// know.
	FailedAt time.Time `json:"failed_at"`
}

// failedRows returns the first FailedRowsShown rows of queue's
// FailedRows function, how many it returned in all, and the error that
// explains why they could not be read; ok is false when the app declared
// no function for queue.
func (h *handler) failedRows(ctx context.Context, queue string) (rows []FailedRow, total int, problem string, ok bool) {
	read := h.opts.FailedRows[queue]
	if read == nil {
		return nil, 0, "", false
	}
	rows, err := callFailedRows(ctx, read)
	if err != nil {
		return nil, 0, fmt.Sprintf("Options.FailedRows[%q]: %v", queue, err), true
	}
	total = len(rows)
	if total > FailedRowsShown {
		rows = rows[:FailedRowsShown]
	}
	for i := range rows {
		rows[i].Error = cut(rows[i].Error)
		rows[i].FailedAt = rows[i].FailedAt.UTC()
	}
	return rows, total, "", true
}

// callFailedRows calls read, turning its panic into an error.
func callFailedRows(ctx context.Context, read func(context.Context) ([]FailedRow, error)) (rows []FailedRow, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return read(ctx)
}
