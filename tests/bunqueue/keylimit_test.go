package bunqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type keyLimitItem struct {
	bun.BaseModel `bun:"table:bq_keylimit_items"`
	ID            int64 `bun:",pk"`
	Customer      *int64
	Status        string
}

// perKey records handler runs by key: how many of each key run at once
// (at most ever), how many in all at once, and how often each row ran.
type perKey struct {
	mu      sync.Mutex
	running map[int64]int
	most    map[int64]int
	all     concurrency
}

func (p *perKey) run(id int64, key *int64) func() {
	end := p.all.run(id)
	if key == nil {
		return end
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == nil {
		p.running, p.most = map[int64]int{}, map[int64]int{}
	}
	p.running[*key]++
	p.most[*key] = max(p.most[*key], p.running[*key])
	return func() {
		p.mu.Lock()
		p.running[*key]--
		p.mu.Unlock()
		end()
	}
}

// Three clients on pools of their own, four workers each with batches
// that size themselves, on a queue with a KeyLimit of two per customer:
// the first 60 rows are all one customer's, then the others' are mixed,
// and some rows have no customer. No customer ever has more than two
// handlers running at once; the other customers' rows run while the
// first one's is full (more than two handlers run at once); every row
// runs once.
func TestKeyLimitAcrossProcesses(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		const (
			rows, limit = 240, 2
			customers   = 8
		)
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		srvTable(t, db, "bq_keylimit_items", "id BIGINT NOT NULL PRIMARY KEY, customer BIGINT NULL, status VARCHAR(16) NOT NULL DEFAULT 'waiting'", "status, id")
		var values []string
		for id := 1; id <= rows; id++ {
			customer := "1"
			switch {
			case id > 60 && id%10 == 0:
				customer = "NULL"
			case id > 60:
				customer = fmt.Sprint(id%customers + 1)
			}
			values = append(values, fmt.Sprintf("(%d, %s)", id, customer))
		}
		dbtest.Exec(t, db, "INSERT INTO bq_keylimit_items (id, customer) VALUES "+strings.Join(values, ", "))
		queue := dbtest.Name("keylimit")
		t.Cleanup(func() { clearSlots(db, queue) })
		var pk perKey
		for range pauseClientsOn(srv) {
			q := bunqueue.NewQueue(queue, heWaiting, func(ctx context.Context, tx bun.Tx, it *keyLimitItem) error {
				defer pk.run(it.ID, it.Customer)()
				time.Sleep(limitWork)
				return setStatus(ctx, tx, it, "done")
			}, &bunqueue.QueueConfig[keyLimitItem]{Workers: limitWorkers, PollInterval: 50 * time.Millisecond, KeyColumn: "customer", KeyLimit: limit})
			start(t, newClient(t, srv.Open(t, 0), q))
		}
		eventually(t, 60*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_keylimit_items WHERE status = 'done'") == rows
		}, "every row done")
		pk.check(t, rows, limit, customers, srv.Name != "sqlite")
	})
}

// The same with jobs, in lock and lease mode: the key is the job's
// EnqueueOpts.LimitKey; jobs without one are not limited.
func TestKeyLimitJobsAcrossProcesses(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			t.Run(mode.String(), func(t *testing.T) {
				t.Parallel()
				const jobs, limit, customers = 240, 2, 8
				db := srv.Open(t, 0)
				require.NoError(t, bunqueue.Migrate(t.Context(), db))
				queue := ownJobQueue(t, db)
				t.Cleanup(func() { clearSlots(db, queue) })
				enq, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}}})
				require.NoError(t, err)
				params := make([]bunqueue.EnqueueParams, jobs)
				for i := range params {
					n := i + 1
					key := "1"
					switch {
					case n > 60 && n%10 == 0:
						key = ""
					case n > 60:
						key = fmt.Sprint(n%customers + 1)
					}
					params[i] = bunqueue.EnqueueParams{Args: keyJobArgs{N: n, Customer: key}, Opts: &bunqueue.EnqueueOpts{Queue: queue, LimitKey: key}}
				}
				_, err = enq.EnqueueMany(t.Context(), db, params)
				require.NoError(t, err)
				var pk perKey
				for range pauseClientsOn(srv) {
					c, err := bunqueue.NewClient(srv.Open(t, 0), &bunqueue.Config{
						Logger: testLogger(t), PollInterval: 50 * time.Millisecond,
						JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Mode: mode, Workers: limitWorkers, Lease: 5 * time.Second, KeyLimit: limit}},
					})
					require.NoError(t, err)
					require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[keyJobArgs](func(ctx context.Context, _ bun.IDB, job *bunqueue.Job[keyJobArgs]) error {
						var key *int64
						if job.Args.Customer != "" {
							k := int64(job.Args.Customer[0] - '0')
							key = &k
						}
						defer pk.run(int64(job.Args.N), key)()
						time.Sleep(limitWork)
						return nil
					})))
					start(t, c)
				}
				eventually(t, 60*time.Second, func() bool {
					return count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE queue = ?", queue) == 0
				}, "every job done")
				pk.check(t, jobs, limit, customers, srv.Name != "sqlite")
			})
		}
	})
}

type keyJobArgs struct {
	N        int    `json:"n"`
	Customer string `json:"customer"`
}

func (keyJobArgs) Kind() string { return "bq_keylimit_job" }

// check requires that each of n items ran once, no key had more than
// limit running at once, customers keys ran, and, if parallel, that the
// first key reached its limit while others ran beside it.
func (p *perKey) check(t *testing.T, n, limit, customers int, parallel bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("most at once per customer: %v; in all: %d", p.most, p.all.most)
	require.Len(t, p.most, customers, "customers run")
	for customer, most := range p.most {
		require.LessOrEqual(t, most, limit, "customer %d's handlers at once", customer)
	}
	if parallel {
		require.Equal(t, limit, p.most[1], "the first customer's limit was reached")
		require.Greater(t, p.all.most, limit, "other customers ran beside the first")
	}
	p.all.mu.Lock()
	defer p.all.mu.Unlock()
	require.Len(t, p.all.runs, n)
	for id, runs := range p.all.runs {
		require.Equal(t, 1, runs, "runs of item %d", id)
	}
}

// KeyLimit (or KeyRate) and KeyColumn go together, and KeyColumn names a column of
// the model; a negative KeyLimit is refused; each error names the field.
func TestKeyLimitErrors(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	for _, tc := range []struct {
		cfg  bunqueue.QueueConfig[keyLimitItem]
		want string
	}{
		{bunqueue.QueueConfig[keyLimitItem]{KeyLimit: -1, KeyColumn: "customer"}, "QueueConfig.KeyLimit must not be negative, got -1"},
		{bunqueue.QueueConfig[keyLimitItem]{KeyLimit: 1}, `QueueConfig.KeyLimit and KeyRate need a KeyColumn: got KeyLimit 1, KeyRate 0/0s`},
		{bunqueue.QueueConfig[keyLimitItem]{KeyColumn: "customer"}, `QueueConfig.KeyColumn "customer" needs a KeyLimit or a KeyRate`},
		{bunqueue.QueueConfig[keyLimitItem]{KeyLimit: 1, KeyColumn: "nope"}, `QueueConfig.KeyColumn "nope" is not a column of model`},
	} {
		c, err := bunqueue.NewClient(db, nil)
		require.NoError(t, err)
		q := bunqueue.NewQueue("kl", heWaiting, func(context.Context, bun.Tx, *keyLimitItem) error { return nil }, &tc.cfg)
		require.ErrorContains(t, c.Add(q), tc.want)
	}
}
