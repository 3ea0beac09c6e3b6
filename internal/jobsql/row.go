package jobsql

import (
	"time"

	"github.com/uptrace/bun"
)

// Row is a row of the jobs table, as claims, reads and the workers see
// it.
type Row struct {
	bun.BaseModel `bun:"table:bunqueue_jobs,alias:j"`

	ID          int64 `bun:",pk,autoincrement"`
	Queue       string
	Kind        string
	Args        []byte
	Metadata    []byte
	Priority    int
	State       int
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	CompletedAt *time.Time
	LastError   *string
	UniqueKey   *string
	LimitKey    *string // for the queue's KeyLimit
	LeaseToken  *string
	// TraceContext is the carrier of the span that enqueued the job.
	TraceContext []byte
	// Flow is the job's workflow bits (FlowDependents, FlowDependencies):
	// 0 for a job outside any workflow.
	Flow int
	// WaitedUS is what a claim read of the job's wait, in microseconds
	// on the database clock (SQL.WaitColumn), and ClaimedAt when that
	// claim's statement ran, on this process's clock (see Row.Waited).
	WaitedUS  int64     `bun:"waited_us,scanonly"`
	ClaimedAt time.Time `bun:"-"`
	// Output is what the worker of a lock-mode attempt recorded with
	// RecordOutput, once it returned, for the statement that completes
	// the job; nil if it recorded none. It is not read from the table.
	Output []byte `bun:"-"`
}

// Waited is how long the job had been due when its worker starts it, now:
// its wait at the claim, read on the database clock, plus the time since
// the claim, on this process's monotonic clock, so that no two clocks are
// compared. ok is false for a row that no claim read.
func (r *Row) Waited() (d time.Duration, ok bool) {
	if r.ClaimedAt.IsZero() {
		return 0, false
	}
	return max(0, time.Duration(r.WaitedUS)*time.Microsecond+time.Since(r.ClaimedAt)), true
}
