package bunqueue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

type prefixArgs struct {
	N int `json:"n"`
}

func (prefixArgs) Kind() string { return "t_prefix" }

// An error of bunqueue that wraps another of bunqueue's says "bunqueue: "
// once, at its start, and still wraps it: the job actions, the failed
// jobs' calls, EnqueueMany, RecordOutput, Cancel, and the error a job
// whose args do not decode is stored with (TestErrorsSayBunqueueOnce
// has the others).
func TestJobErrorsSayBunqueueOnce(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[prefixArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[prefixArgs]) error {
		return nil
	})))
	ctx := t.Context()
	const unknown = 1 << 62
	completed := enqueueOne(t, c, db, prefixArgs{N: 1}, &bunqueue.EnqueueOpts{Queue: queue, Delay: time.Hour})
	_, err := db.NewRaw("UPDATE bunqueue_jobs SET state = 1, completed_at = "+nowSQL(db)+" WHERE id = ?", completed).Exec(ctx)
	require.NoError(t, err)

	errOf := func(_ any, err error) error { return err }
	for _, tc := range []struct {
		err  error
		want string
		is   error
	}{
		{c.JobRunNow(ctx, unknown), fmt.Sprintf("bunqueue: run now job %d: no job with that id", unknown), bunqueue.ErrJobNotFound},
		{c.JobDelete(ctx, unknown), fmt.Sprintf("bunqueue: delete job %d: no job with that id", unknown), bunqueue.ErrJobNotFound},
		{errOf(c.JobCancel(ctx, unknown)), fmt.Sprintf("bunqueue: cancel job %d: no job with that id", unknown), bunqueue.ErrJobNotFound},
		{errOf(c.JobGet(ctx, unknown)), fmt.Sprintf("bunqueue: get job %d: no job with that id", unknown), bunqueue.ErrJobNotFound},
		{c.JobRunNow(ctx, completed), fmt.Sprintf("bunqueue: run now job %d: the job has finished: it completed", completed), bunqueue.ErrJobFinished},
		{c.DeleteFailed(ctx, unknown), fmt.Sprintf("bunqueue: delete failed job %d: no failed job with that id", unknown), bunqueue.ErrFailedJobNotFound},
		{errOf(c.RetryFailed(ctx, unknown)), fmt.Sprintf("bunqueue: retry failed job %d: no failed job with that id", unknown), bunqueue.ErrFailedJobNotFound},
		{errOf(c.EnqueueMany(ctx, db, []bunqueue.EnqueueParams{{Args: prefixArgs{}, Opts: &bunqueue.EnqueueOpts{Queue: queue, Priority: 1 << 20}}})),
			"bunqueue: EnqueueMany: job 0: enqueue t_prefix: ", bunqueue.ErrInvalidJob},
		{bunqueue.RecordOutput(ctx, 1), "bunqueue: RecordOutput: not called with the context of a running job's worker", bunqueue.ErrNotInWorker},
		{bunqueue.Cancel(bunqueue.ErrJobRunning), "bunqueue: job cancelled: the job is running", bunqueue.ErrJobRunning},
	} {
		require.ErrorIs(t, tc.err, tc.is)
		require.True(t, strings.HasPrefix(tc.err.Error(), tc.want), "got %q, want %q…", tc.err, tc.want)
		sayOnce(t, tc.err, "")
	}

	// A job whose args do not decode is cancelled with an error that
	// says so, stored as it is logged.
	bad := insertRawJob(t, db, queue, "t_prefix", []byte(`"not an object"`), nil, 0, 3)
	start(t, c)
	f := waitFailed(t, db, bad, 10*time.Second)
	require.True(t, strings.HasPrefix(f.Error, fmt.Sprintf("bunqueue: job cancelled: decode the args of job %d", bad)), f.Error)
	require.Equal(t, 1, strings.Count(f.Error, "bunqueue:"), f.Error)
}
