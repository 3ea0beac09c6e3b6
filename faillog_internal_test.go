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
			`level=INFO msg="bunqueue: job released on stop; it runs again" queue=q job_id=7 kind=welcome attempt=1 max_attempts=3 outcome=released error="released on stop: context canceled"`},
		{"row recorded", &ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom"), Recorded: true},
			`level=WARN msg="bunqueue: item failed" queue=q error="bunqueue: queue \"q\": row id=1: boom"`},
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
		logItemError(t.Context(), log.With("queue", "q"), tc.err)
		require.Equal(t, tc.want, strings.TrimSpace(b.String()), tc.name)
	}
}
