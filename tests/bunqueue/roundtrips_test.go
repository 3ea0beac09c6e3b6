package bunqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// spArgs is a job of TestSavepointsOnDemand: what its worker does.
type spArgs struct {
	Do string `json:"do"` // "nothing", "write", "write-fail", "fail"
	N  int    `json:"n"`
}

func (spArgs) Kind() string { return "t_savepoints" }

// A lock-mode batch takes a job's savepoint right before the first
// statement its worker (or the failure's record) runs in the batch's
// transaction, not before every job: jobs that run no statement cost no
// SAVEPOINT. Counted at the driver: one SAVEPOINT per job that wrote
// (even through a context of its own), or that failed (its failure is
// recorded in the transaction); one ROLLBACK TO SAVEPOINT per job that
// wrote and failed, whose write is undone; none for the others.
func TestSavepointsOnDemand(t *testing.T) {
	t.Parallel()
	admin := migrated(t, 0)
	queue := ownJobQueue(t, admin)
	createTable(t, admin, "bq_test_sp_effect", "job_n BIGINT NOT NULL")

	in := faultdriver.NewInjector(1)
	never := []faultdriver.Fault{faultdriver.Deadlock} // probability 0: the rules count what they match
	in.Add(
		faultdriver.Rule{Step: "savepoint", Match: relPrefix(relOpExec, "SAVEPOINT"), Faults: never},
		faultdriver.Rule{Step: "rollback to", Match: relPrefix(relOpExec, "ROLLBACK TO SAVEPOINT"), Faults: never},
	)
	// One worker: no batch meets another, so no handler runs twice.
	c := jobsTestClient(t, relFaultDB(t, in, 0), bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1}},
	})
	var runs atomic.Int64
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[spArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[spArgs]) error {
		runs.Add(1)
		switch job.Args.Do {
		case "write", "write-fail":
			// Through a context the engine never saw: the savepoint is
			// the transaction's, not the context's.
			if _, err := db.NewRaw("INSERT INTO bq_test_sp_effect (job_n) VALUES (?)", job.Args.N).Exec(context.Background()); err != nil {
				return err
			}
		}
		if strings.HasSuffix(job.Args.Do, "fail") {
			return bunqueue.Cancel(errors.New("t_savepoints: fails for good"))
		}
		return nil
	})))

	counts := map[string]int{"nothing": 120, "write": 60, "write-fail": 15, "fail": 15}
	var jobs []bunqueue.EnqueueParams
	n := 0
	for i := range 120 { // interleaved, so that batches mix them
		for _, do := range []string{"nothing", "write", "write-fail", "fail"} {
			if i < counts[do] {
				n++
				jobs = append(jobs, bunqueue.EnqueueParams{Args: spArgs{Do: do, N: n}, Opts: &bunqueue.EnqueueOpts{Queue: queue}})
			}
		}
	}
	_, err := c.EnqueueMany(t.Context(), admin, jobs)
	require.NoError(t, err)
	start(t, c)
	eventually(t, 60*time.Second, func() bool {
		return count(t, admin, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
	}, "every job finished")
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stop))

	require.Equal(t, int64(len(jobs)), runs.Load(), "each job ran once")
	require.Equal(t, counts["write"], count(t, admin, "SELECT COUNT(*) FROM bq_test_sp_effect"),
		"the writes of the jobs that failed were undone")
	require.Equal(t, counts["write-fail"]+counts["fail"], count(t, admin, "SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE queue = ?", queue))
	m := in.Matched()
	t.Logf("statements: %v", m)
	require.Equal(t, counts["write"]+counts["write-fail"]+counts["fail"], m["savepoint"],
		fmt.Sprintf("one SAVEPOINT per job that ran a statement in the batch (%d no-op jobs ran none)", counts["nothing"]))
	require.Equal(t, counts["write-fail"], m["rollback to"], "one ROLLBACK TO SAVEPOINT per failed job that wrote")
}
