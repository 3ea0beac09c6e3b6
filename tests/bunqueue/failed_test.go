package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// insertFailed writes a failed job straight into bunqueue_failed_jobs and
// returns its id.
func insertFailed(t *testing.T, db bun.IDB, queue, kind string, jobID int64, uniqueKey *string) int64 {
	t.Helper()
	return insertID(t, db, `INSERT INTO bunqueue_failed_jobs
	(job_id, queue, kind, args, metadata, priority, attempts, max_attempts, unique_key, error, created_at, failed_at)
VALUES (?, ?, ?, ?, NULL, 3, 2, 2, ?, ?, `+plusSQL(db, -time.Hour)+`, `+nowSQL(db)+`)`,
		jobID, queue, kind, []byte(fmt.Sprintf(`{"job": %d}`, jobID)), uniqueKey, fmt.Sprintf("error of job %d", jobID))
}

func failedIDs(jobs []bunqueue.FailedJob) []int64 {
	out := make([]int64, len(jobs))
	for i, f := range jobs {
		out[i] = f.ID
	}
	return out
}

// FailedJobs filters by queue and kind, lists newest first, and pages with
// BeforeID and Limit; a Limit out of 1..1000 is an error, zero means 100.
// FailedJobsTx reads through the caller's transaction.
func TestFailedJobsListing(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	qa, qb := ownJobQueue(t, db), ownJobQueue(t, db)
	kx, ky := dbtest.Name("t_failed_x"), dbtest.Name("t_failed_y")
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{qa: {}, qb: {}}})
	ctx := t.Context()

	var inA, inAX, ofX []int64
	for i, row := range []struct{ queue, kind string }{
		{qa, kx}, {qa, ky}, {qb, kx}, {qa, kx}, {qa, kx}, {qb, ky}, {qa, ky},
	} {
		id := insertFailed(t, db, row.queue, row.kind, int64(1000+i), nil)
		if row.queue == qa {
			inA = append([]int64{id}, inA...)
			if row.kind == kx {
				inAX = append([]int64{id}, inAX...)
			}
		}
		if row.kind == kx {
			ofX = append([]int64{id}, ofX...)
		}
	}

	list := func(f bunqueue.FailedJobsFilter) []int64 {
		t.Helper()
		jobs, err := c.FailedJobs(ctx, f)
		require.NoError(t, err)
		return failedIDs(jobs)
	}
	require.Equal(t, inA, list(bunqueue.FailedJobsFilter{Queue: qa}), "queue filter, newest first")
	require.Equal(t, inAX, list(bunqueue.FailedJobsFilter{Queue: qa, Kind: kx}), "queue and kind")
	require.Equal(t, ofX, list(bunqueue.FailedJobsFilter{Kind: kx}), "kind alone, across queues")
	require.Equal(t, ofX[:2], list(bunqueue.FailedJobsFilter{Kind: kx, Limit: 2}))
	require.Empty(t, list(bunqueue.FailedJobsFilter{Queue: qa, Kind: dbtest.Name("t_failed_none")}))

	// Pages of two, with BeforeID, cover the queue once, in order.
	var paged []int64
	var before int64
	for page := 0; ; page++ {
		got := list(bunqueue.FailedJobsFilter{Queue: qa, Limit: 2, BeforeID: before})
		require.LessOrEqual(t, len(got), 2)
		if len(got) == 0 {
			break
		}
		require.Less(t, page, 10, "paging does not end")
		paged = append(paged, got...)
		before = got[len(got)-1]
	}
	require.Equal(t, inA, paged)
	require.Equal(t, inA[2:], list(bunqueue.FailedJobsFilter{Queue: qa, BeforeID: inA[1]}))

	// The fields are what the table holds.
	jobs, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: qb, Kind: ky})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	f := jobs[0]
	require.Equal(t, qb, f.Queue)
	require.Equal(t, ky, f.Kind)
	require.EqualValues(t, 1005, f.JobID)
	require.Equal(t, []byte(`{"job": 1005}`), f.Args)
	require.Nil(t, f.Metadata)
	require.Equal(t, "error of job 1005", f.Error)
	require.Equal(t, 3, f.Priority)
	require.Equal(t, 2, f.Attempts)
	require.Equal(t, 2, f.MaxAttempts)
	require.Nil(t, f.UniqueKey)
	require.InDelta(t, time.Hour.Seconds(), f.FailedAt.Sub(f.CreatedAt).Seconds(), 1)
	requireUTC(t, f.FailedAt, "FailedJob.FailedAt")

	// Limits.
	for _, limit := range []int{-1, 1001, math.MaxInt} {
		_, err := c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: qa, Limit: limit})
		require.Error(t, err, "limit %d", limit)
		require.Contains(t, err.Error(), "Limit must be within 1..1000")
	}
	require.Equal(t, inA, list(bunqueue.FailedJobsFilter{Queue: qa, Limit: 1000}))
	require.Equal(t, inA[:1], list(bunqueue.FailedJobsFilter{Queue: qa, Limit: 1}))
	qc := ownJobQueue(t, db)
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for i := range 105 {
			insertFailed(t, tx, qc, kx, int64(3000+i), nil)
		}
		return nil
	}))
	jobs, err = c.FailedJobs(ctx, bunqueue.FailedJobsFilter{Queue: qc})
	require.NoError(t, err)
	require.Len(t, jobs, 100, "a zero Limit lists 100")
	require.EqualValues(t, 3104, jobs[0].JobID, "newest first")
	jobs, err = c.FailedJobs(ctx, bunqueue.FailedJobsFilter{})
	require.NoError(t, err)
	require.Len(t, jobs, 100, "a zero Limit lists 100, the filter's zero value lists all queues")

	// FailedJobsTx sees the transaction's own writes.
	require.Error(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		id := insertFailed(t, tx, qa, kx, 2000, nil)
		jobs, err := c.FailedJobsTx(ctx, tx, bunqueue.FailedJobsFilter{Queue: qa, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []int64{id}, failedIDs(jobs))
		return errors.New("roll back")
	}))
	require.Equal(t, inA, list(bunqueue.FailedJobsFilter{Queue: qa}))
}

// DeleteFailed removes a failed job; an unknown id is ErrFailedJobNotFound
// for DeleteFailed and RetryFailed; DeleteFailedTx follows its
// transaction.
func TestDeleteFailed(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	kind := dbtest.Name("t_failed_delete")
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	ctx := t.Context()
	a := insertFailed(t, db, queue, kind, 1, nil)
	b := insertFailed(t, db, queue, kind, 2, nil)
	exists := func(id int64) bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", id) == 1
	}

	require.NoError(t, c.DeleteFailed(ctx, a))
	require.False(t, exists(a))
	require.True(t, exists(b), "only that job is removed")

	for _, id := range []int64{a, math.MaxInt64} {
		err := c.DeleteFailed(ctx, id)
		require.ErrorIs(t, err, bunqueue.ErrFailedJobNotFound)
		require.Contains(t, err.Error(), fmt.Sprint(id))
		_, err = c.RetryFailed(ctx, id)
		require.ErrorIs(t, err, bunqueue.ErrFailedJobNotFound)
		require.Contains(t, err.Error(), fmt.Sprint(id))
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := c.RetryFailedTx(ctx, tx, id)
			require.ErrorIs(t, err, bunqueue.ErrFailedJobNotFound)
			require.ErrorIs(t, c.DeleteFailedTx(ctx, tx, id), bunqueue.ErrFailedJobNotFound)
			return nil
		}))
	}
	require.Zero(t, count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue))

	// In a transaction that rolls back, the job stays; committed, it goes.
	require.Error(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		require.NoError(t, c.DeleteFailedTx(ctx, tx, b))
		require.Zero(t, count(t, tx, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", b))
		return errors.New("roll back")
	}))
	require.True(t, exists(b))
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return c.DeleteFailedTx(ctx, tx, b)
	}))
	require.False(t, exists(b))
}

type failedRetryArgs struct {
	N int `json:"n"`
}

func (failedRetryArgs) Kind() string { return "t_failed_retry" }

// RetryFailedTx follows its transaction: rolled back, the failed job stays
// where it was and no job is made; committed, the job is back, with its
// payload, priority, max attempts, unique key and created_at, and runs.
// RetryFailed refuses a failed job whose queue is not configured, and
// gives the pending job's id when one holds the same unique key.
func TestRetryFailedTx(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	unknown := ownJobQueue(t, db) // not in JobQueues
	c := jobsTestClient(t, db, bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
	ctx := t.Context()
	jobsIn := func(q string) int {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", q)
	}
	exists := func(id int64) bool {
		return count(t, db, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE id = ?", id) == 1
	}
	key := queue + "-retry"
	f := insertFailed(t, db, queue, "t_failed_retry", 7, &key)

	require.Error(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		id, err := c.RetryFailedTx(ctx, tx, f)
		require.NoError(t, err)
		require.Equal(t, 1, count(t, tx, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?", id), "the transaction sees the job")
		return errors.New("roll back")
	}))
	require.True(t, exists(f), "the failed job stays where it was")
	require.Zero(t, jobsIn(queue), "no job was made")

	var newID int64
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) (err error) {
		newID, err = c.RetryFailedTx(ctx, tx, f)
		return err
	}))
	require.False(t, exists(f))
	type back struct {
		Args        []byte
		Priority    int
		MaxAttempts int
		Attempts    int
		UniqueKey   string
		Age         int64 // seconds since created_at
		Due         int64 // run_at - now, µs
	}
	var got back
	require.NoError(t, db.NewRaw(`SELECT args, priority, max_attempts, attempts, unique_key,
	`+diffSQL(db, "SECOND", "created_at", nowSQL(db))+`, `+diffSQL(db, "MICROSECOND", nowSQL(db), "run_at")+`
FROM bunqueue_jobs WHERE id = ?`, newID).Scan(ctx, &got.Args, &got.Priority, &got.MaxAttempts, &got.Attempts, &got.UniqueKey, &got.Age, &got.Due))
	require.Equal(t, []byte(`{"job": 7}`), got.Args)
	require.Equal(t, 3, got.Priority)
	require.Equal(t, 2, got.MaxAttempts)
	require.Zero(t, got.Attempts)
	require.Equal(t, key, got.UniqueKey)
	require.InDelta(t, 3600, got.Age, 5, "created_at is kept")
	require.LessOrEqual(t, got.Due, int64(0), "due now")

	// A failed job with the key of a pending job: the pending job's id,
	// and no second job.
	g := insertFailed(t, db, queue, "t_failed_retry", 8, &key)
	id, err := c.RetryFailed(ctx, g)
	require.NoError(t, err)
	require.Equal(t, newID, id)
	require.Equal(t, 1, jobsIn(queue))
	require.False(t, exists(g))

	// A queue this client does not run.
	h := insertFailed(t, db, unknown, "t_failed_retry", 9, nil)
	_, err = c.RetryFailed(ctx, h)
	require.Error(t, err)
	require.Contains(t, err.Error(), unknown)
	require.Contains(t, err.Error(), "Config.JobQueues")
	require.True(t, exists(h))
	require.Zero(t, jobsIn(unknown))

	// The retried job runs.
	var ran atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[failedRetryArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[failedRetryArgs]) error {
		ran.Add(1)
		return nil
	})))
	start(t, c)
	eventually(t, 10*time.Second, func() bool { return jobsIn(queue) == 0 }, "the retried job runs")
	require.EqualValues(t, 1, ran.Load())
}
