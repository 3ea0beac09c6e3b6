package bunqueue

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The log lines of failures the servers are slow to provoke: a job whose
// failure could not be recorded, one released on stop, and a row of an
// any-table queue.
func TestLogItemError(t *testing.T) {
	t.Parallel()
	row := &jobRow{ID: 7, Kind: "welcome", MaxAttempts: 3}
	unrecorded := newJobFate(row, 2)
	stopped := newJobFate(row, 1)
	stopped.stopped = true
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"job not recorded", &ItemError{Queue: "q", Key: "id=7", Err: errors.New("smtp down; OnError failed too: bad connection"), Cooldown: 2 * time.Second, job: unrecorded},
			`level=ERROR msg="bunqueue: job failed and nothing was recorded; it stays in its queue" queue=q job_id=7 kind=welcome attempt=2 max_attempts=3 outcome=released cooldown=2s error="smtp down; OnError failed too: bad connection"`},
		{"job released on stop", &ItemError{Queue: "q", Key: "id=7", Err: errors.New("bunqueue: released on stop: context canceled"), job: stopped},
			`level=INFO msg="bunqueue: job released on stop; it runs again" queue=q job_id=7 kind=welcome attempt=1 max_attempts=3 outcome=released error="bunqueue: released on stop: context canceled"`},
		{"row recorded", &ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom"), Recorded: true},
			`level=INFO msg="bunqueue: item failed" queue=q error="bunqueue: queue \"q\": row id=1: boom"`},
		{"row cooled down", &ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom"), Cooldown: time.Second},
			`level=ERROR msg="bunqueue: item failed" queue=q error="bunqueue: queue \"q\": row id=1: boom (left alone for 1s)"`},
	} {
		var b bytes.Buffer
		log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		(&Client{}).logItemError(t.Context(), log.With("queue", "q"), tc.err)
		require.Equal(t, tc.want, strings.TrimSpace(b.String()), tc.name)
	}
}

// A queue's LogLevel drops the lines of its failures below it: a table
// queue's (QueueConfig), and a jobs queue's (JobQueueConfig), by the
// queue's name; a *slog.LevelVar changes it as the queue runs.
func TestLogItemErrorLevel(t *testing.T) {
	t.Parallel()
	warn := new(slog.LevelVar)
	warn.Set(slog.LevelWarn)
	table := &Queue[struct{}]{name: "rows", cfg: QueueConfig[struct{}]{LogLevel: warn}}
	c := &Client{queues: []AnyQueue{table}, cfg: Config{JobQueues: map[string]JobQueueConfig{
		"jobs": {LogLevel: slog.LevelError}, "loud": {},
	}}}
	row := &jobRow{ID: 7, Kind: "welcome", MaxAttempts: 3}
	retried := newJobFate(row, 1)
	retried.recorded(errors.New("smtp down"), time.Second)
	failed := newJobFate(row, 3)
	failed.recorded(errors.New("smtp down"), 0)
	recordedRow := &ItemError{Queue: "rows", Key: "id=1", Err: errors.New("declined"), Recorded: true}
	lostRow := &ItemError{Queue: "rows", Key: "id=2", Err: errors.New("boom"), Cooldown: time.Second}
	job := func(queue string, f *jobFate) *ItemError {
		return &ItemError{Queue: queue, Key: "id=7", Err: errors.New("smtp down"), Recorded: true, job: f}
	}
	levels := func(errs ...error) []string {
		var b bytes.Buffer
		log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
		for _, err := range errs {
			c.logItemError(t.Context(), log, err)
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if line != "" {
				_, after, _ := strings.Cut(line, "level=")
				level, _, _ := strings.Cut(after, " ")
				out = append(out, level)
			}
		}
		return out
	}
	require.Equal(t, []string{"ERROR"}, levels(recordedRow, lostRow), "the table queue's WARN drops the recorded row's INFO")
	warn.Set(slog.LevelInfo)
	require.Equal(t, []string{"INFO", "ERROR"}, levels(recordedRow, lostRow), "the LevelVar lowered")
	require.Equal(t, []string{"ERROR"}, levels(job("jobs", retried), job("jobs", failed)), "the jobs queue's ERROR drops the retry's WARN")
	require.Equal(t, []string{"WARN", "ERROR"}, levels(job("loud", retried), job("loud", failed)), "no LogLevel drops nothing")
}
