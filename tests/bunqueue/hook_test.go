package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// recordingHook records the calls it gets, and can fail WorkBegin or
// replace the result in WorkEnd.
type recordingHook struct {
	name        string
	mu          *sync.Mutex
	calls       *[]string
	failKey     string // WorkBegin fails for this key
	swallow     bool   // WorkEnd turns an error into nil
	override    error  // WorkEnd returns this instead, for the key overrideKey
	overrideKey string
}

func (h recordingHook) WorkBegin(ctx context.Context, w *bunqueue.WorkInfo) error {
	h.mu.Lock()
	*h.calls = append(*h.calls, fmt.Sprintf("%s begin %s %s", h.name, w.Queue, w.Key))
	h.mu.Unlock()
	if w.Key == h.failKey {
		return errors.New("refused by " + h.name)
	}
	return nil
}

func (h recordingHook) WorkEnd(ctx context.Context, w *bunqueue.WorkInfo, err error) error {
	h.mu.Lock()
	*h.calls = append(*h.calls, fmt.Sprintf("%s end %s %v", h.name, w.Key, err))
	h.mu.Unlock()
	switch {
	case h.override != nil && w.Key == h.overrideKey:
		return h.override
	case h.swallow:
		return nil
	}
	return err
}

// hook returns h as a bunqueue.Hook.
func (h recordingHook) hook() bunqueue.Hook {
	return bunqueue.Hook{WorkBegin: h.WorkBegin, WorkEnd: h.WorkEnd}
}

type hookItem struct {
	bun.BaseModel `bun:"table:bq_test_hooks"`
	ID            int64 `bun:",pk"`
	Status        string
}

func TestLifecycleHooks(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	createTable(t, db, "bq_test_hooks", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)")
	dbtest.Exec(t, db, "INSERT INTO bq_test_hooks (id) VALUES (1), (2), (3)")

	var mu sync.Mutex
	var calls []string
	var handled []int64
	clientHook := recordingHook{name: "client", mu: &mu, calls: &calls, failKey: "id=2"}
	queueHook := recordingHook{name: "queue", mu: &mu, calls: &calls, override: errOverride, overrideKey: "id=1"}
	c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t), Hooks: []bunqueue.Hook{{}, clientHook.hook()}})
	require.NoError(t, err)
	q := bunqueue.NewQueue("hooks",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *hookItem) error {
			mu.Lock()
			handled = append(handled, it.ID)
			mu.Unlock()
			_, err := tx.NewUpdate().Model(it).Set("status = 'done'").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[hookItem]{Hooks: []bunqueue.Hook{{WorkBegin: queueHook.WorkBegin}, {WorkEnd: queueHook.WorkEnd}}})
	require.NoError(t, c.Add(q))

	// A Hook may leave either function nil, or both: the client's first
	// sets none, and the queue's hook comes in two halves; the calls are
	// those of whole hooks.
	//
	// Row 1: hooks in order (client, then queue), and the queue's WorkEnd
	// replaces the nil result with its own error: the row's writes are
	// undone.
	ok, err := q.ProcessNext(t.Context())
	require.True(t, ok)
	require.ErrorIs(t, err, errOverride)
	require.Equal(t, "waiting", str(t, db, "SELECT status FROM bq_test_hooks WHERE id = 1"))
	// Row 2: the client's WorkBegin refuses it: the handler does not run.
	ok, err = q.ProcessNext(t.Context())
	require.True(t, ok)
	require.ErrorContains(t, err, "refused by client")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1}, handled, "row 2's handler did not run")
	require.Equal(t, []string{
		"client begin hooks id=1", "queue begin hooks id=1",
		"client end id=1 <nil>", "queue end id=1 <nil>",
		"client begin hooks id=2",
		"client end id=2 refused by client", "queue end id=2 refused by client",
	}, calls)
}

var errOverride = errors.New("overridden by the queue's hook")

type hookJobArgs struct{ N int }

func (hookJobArgs) Kind() string { return "t_hook_job" }

// A job's hooks see its kind, id and attempt, and WorkEnd can turn a
// failure into a completion.
func TestLifecycleHooksOnJobs(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			queue := jobQueue(t)
			t.Cleanup(func() { _, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue) })
			var mu sync.Mutex
			var calls []string
			hook := recordingHook{name: "job", mu: &mu, calls: &calls, swallow: true}
			c, err := bunqueue.NewClient(db, &bunqueue.Config{
				PollInterval: 20 * time.Millisecond, Logger: testLogger(t),
				JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Hooks: []bunqueue.Hook{hook.hook()}}},
			})
			require.NoError(t, err)
			var infoSeen bunqueue.WorkInfo
			require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[hookJobArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[hookJobArgs]) error {
				infoSeen = bunqueue.WorkInfo{Queue: job.Queue, Key: fmt.Sprintf("id=%d", job.ID), JobID: job.ID, Kind: job.Kind, Attempt: job.Attempt}
				return errors.New("worker failed")
			})))
			res, err := c.Enqueue(t.Context(), db, hookJobArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue})
			require.NoError(t, err)
			start(t, c)
			eventually(t, 10*time.Second, func() bool {
				return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
			}, "the swallowed failure completes the job")
			require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?", res.ID))
			mu.Lock()
			defer mu.Unlock()
			key := fmt.Sprintf("id=%d", res.ID)
			require.Equal(t, []string{"job begin " + queue + " " + key, "job end " + key + " worker failed"}, calls)
			require.Equal(t, bunqueue.WorkInfo{Queue: queue, Key: key, JobID: res.ID, Kind: "t_hook_job", Attempt: 1}, infoSeen)
		})
	}
}
