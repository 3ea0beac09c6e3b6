package bunqueue_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/pgxlisten"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The measurements of docs/notify.md, on PostgreSQL, run only with
// BUNQUEUE_LATENCY=1 (they print figures and assert none):
//
//	BUNQUEUE_LATENCY=1 BUNQUEUE_TEST_SERVER=postgres go test -count=1 -v -run 'NotifyLatency|NotifyCost' ./tests/bunqueue
//
// BUNQUEUE_LATENCY_SECONDS sets how long each latency run enqueues
// (default 20), BUNQUEUE_LATENCY_RATE how many jobs a second (300),
// BUNQUEUE_LATENCY_WORKERS the worker process's workers (4), and
// BUNQUEUE_LATENCY_MODES which runs (notify,notify-tx-hooked,notify-tx,poll).

const (
	latencyEnv       = "BUNQUEUE_LATENCY"
	latencyWorkerEnv = "BUNQUEUE_LATENCY_WORKER" // the worker process's DSN
	latencyLine      = "bunqueue-latency "       // a job started: its number and when
	notifiedLine     = "bunqueue-notified "      // a notification came, and when
)

type latencyArgs struct {
	N int `json:"n"` // the job's number, from 0
}

func (latencyArgs) Kind() string { return "latency" }

func skipUnlessLatency(t *testing.T) {
	t.Helper()
	if os.Getenv(latencyEnv) != "1" {
		t.Skip("a measurement: set BUNQUEUE_LATENCY=1 to run it")
	}
	if !dbtest.IsPostgres() {
		t.Skip("PostgreSQL only (BUNQUEUE_TEST_SERVER=postgres)")
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestNotifyLatency measures how long a job takes from Enqueue in this
// process to the start of its handler in another (a child process, on a
// pool and a client of its own), at a steady rate, with enqueue
// notifications on and a Listener in the worker, then with neither
// (polling at PollIntervalDefault).
func TestNotifyLatency(t *testing.T) {
	skipUnlessLatency(t)
	seconds, rate := envInt("BUNQUEUE_LATENCY_SECONDS", 20), envInt("BUNQUEUE_LATENCY_RATE", 300)
	for _, mode := range []struct {
		name   string
		notify bool
		inTx   bool // enqueue in a transaction of one job, not through the *bun.DB
		hooked bool // that transaction on a DB with the producer's QueryHook
	}{{"notify", true, false, false}, {"notify-tx-hooked", true, true, true}, {"notify-tx", true, true, false}, {"poll", false, false, false}} {
		name, notify := mode.name, mode.notify
		if only := os.Getenv("BUNQUEUE_LATENCY_MODES"); only != "" && !slices.Contains(strings.Split(only, ","), name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			dsn := dbtest.Scratch(t, "latency")
			db := dbtest.OpenDSN(t, dsn, 0)
			db.SetMaxIdleConns(16) // the producers' 8, and more: no connection opened per call
			require.NoError(t, bunqueue.Migrate(t.Context(), db))
			child := startLatencyWorker(t, dsn, notify)
			client, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t), NoEnqueueNotify: !notify})
			require.NoError(t, err)
			txDB := db
			if mode.hooked {
				txDB = db.WithQueryHook(client.QueryHook())
			}

			// Producers take ticks at rate a second; several, so that a
			// slow commit does not hold back the next tick.
			n := seconds * rate
			ticks := make(chan int, n)
			called, returned := make([]time.Time, n), make([]time.Time, n) // by job
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for i := range ticks {
						called[i] = time.Now()
						args := latencyArgs{N: i}
						var err error
						if mode.inTx {
							err = txDB.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
								_, err := client.Enqueue(ctx, tx, args, nil)
								return err
							})
						} else {
							_, err = client.Enqueue(context.Background(), db, args, nil)
						}
						if err != nil {
							t.Error(err)
							return
						}
						returned[i] = time.Now()
					}
				})
			}
			begin := time.Now()
			interval := time.Second / time.Duration(rate)
			for i := range n {
				time.Sleep(time.Until(begin.Add(time.Duration(i) * interval)))
				ticks <- i
			}
			close(ticks)
			wg.Wait()
			sent := time.Since(begin)
			started := child.wait(t, n)
			// The first second warms up connections and statements.
			var toStart, fromReturn, calls []time.Duration
			for i := min(rate, n/2); i < n; i++ {
				toStart = append(toStart, started[i].Sub(called[i]))
				fromReturn = append(fromReturn, started[i].Sub(returned[i]))
				calls = append(calls, returned[i].Sub(called[i]))
			}
			notified, wake := child.notified(), []time.Duration(nil)
			for i := min(rate, n/2); i < n; i++ {
				// The worker process's part: from the last notification
				// it received before the job started.
				k, _ := slices.BinarySearchFunc(notified, started[i], time.Time.Compare)
				if k > 0 {
					wake = append(wake, started[i].Sub(notified[k-1]))
				}
			}
			t.Logf("%s: %d notifications received; last one received to handler started: %s", name, len(notified), quantiles(wake))
			t.Logf("%s: %d jobs in %s (%.0f/s), after the first %d: Enqueue called to handler started: %s; Enqueue returned to handler started: %s; Enqueue call: %s",
				name, n, sent.Round(time.Millisecond), float64(n)/sent.Seconds(), n-len(toStart), quantiles(toStart), quantiles(fromReturn), quantiles(calls))
		})
	}
}

// latencyWorker is the child process that runs the jobs.
type latencyWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan jobStart

	mu    sync.Mutex
	notes []time.Time // when the worker process received each notification
}

// startLatencyWorker starts the test binary again as a worker process
// (TestNotifyLatencyWorker) on dsn, and waits until it is ready.
func startLatencyWorker(t *testing.T, dsn string, listen bool) *latencyWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNotifyLatencyWorker$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), latencyWorkerEnv+"="+dsn, "BUNQUEUE_LATENCY_LISTEN="+strconv.FormatBool(listen))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &latencyWorker{cmd: cmd, stdin: stdin, lines: make(chan jobStart, 1<<16)}
	ready := make(chan struct{})
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == latencyLine+"ready":
				close(ready)
			case strings.HasPrefix(line, notifiedLine):
				if ns, err := strconv.ParseInt(strings.TrimPrefix(line, notifiedLine), 10, 64); err == nil {
					w.mu.Lock()
					w.notes = append(w.notes, time.Unix(0, ns))
					w.mu.Unlock()
				}
			case strings.HasPrefix(line, latencyLine):
				var js jobStart
				var ns int64
				if _, err := fmt.Sscanf(strings.TrimPrefix(line, latencyLine), "%d %d", &js.n, &ns); err == nil {
					js.at = time.Unix(0, ns)
					w.lines <- js
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker process was not ready within 30s")
	}
	return w
}

// notified returns when the worker process received each notification,
// in order.
func (w *latencyWorker) notified() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.notes)
}

// jobStart is when a job's handler started, in the worker process.
type jobStart struct {
	n  int
	at time.Time
}

// wait returns when each of n jobs started, by job.
func (w *latencyWorker) wait(t *testing.T, n int) []time.Time {
	t.Helper()
	started := make([]time.Time, n)
	timeout := time.After(60 * time.Second)
	for seen := 0; seen < n; {
		select {
		case js, ok := <-w.lines:
			if !ok {
				t.Fatalf("the worker process ended after %d of %d jobs", seen, n)
			}
			if js.n >= 0 && js.n < n && started[js.n].IsZero() {
				started[js.n] = js.at
				seen++
			}
		case <-timeout:
			t.Fatalf("%d of %d jobs started within 60s", seen, n)
		}
	}
	return started
}

// TestNotifyLatencyWorker is the worker process of TestNotifyLatency: it
// runs the jobs on the DSN it is given, printing each one's latency,
// until its standard input closes.
func TestNotifyLatencyWorker(t *testing.T) {
	dsn := os.Getenv(latencyWorkerEnv)
	if dsn == "" {
		t.Skip("the worker process of TestNotifyLatency")
	}
	db := dbtest.OpenDSN(t, dsn, 0)
	db.SetMaxIdleConns(16)
	var listener *pgxlisten.Listener
	var listening chan struct{}
	cfg := &bunqueue.Config{Logger: testLogger(t), JobQueues: map[string]bunqueue.JobQueueConfig{bunqueue.QueueDefault: {Workers: envInt("BUNQUEUE_LATENCY_WORKERS", 4)}}}
	if os.Getenv("BUNQUEUE_LATENCY_LISTEN") == "true" {
		var err error
		listener, err = pgxlisten.New(dbtest.PGDSN())
		require.NoError(t, err)
		listening = make(chan struct{})
		var once sync.Once
		cfg.Listener = bunqueue.ListenerFunc(func(ctx context.Context, ch string, began func(), notified func(string)) error {
			return listener.Listen(ctx, ch, func() { began(); once.Do(func() { close(listening) }) }, func(p string) {
				fmt.Printf("%s%d\n", notifiedLine, time.Now().UnixNano())
				notified(p)
			})
		})
	}
	c, err := bunqueue.NewClient(db, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[latencyArgs](func(ctx context.Context, tx bun.IDB, job *bunqueue.Job[latencyArgs]) error {
		at := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s%d %d\n", latencyLine, job.Args.N, at)
		return out.Flush()
	})))
	require.NoError(t, c.Start(t.Context()))
	if listening != nil {
		<-listening
	}
	fmt.Println(latencyLine + "ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

// TestNotifyCost measures what notifying adds to Enqueue: the same jobs
// enqueued one at a time, alternately with and without notifications,
// through a *bun.DB (the insert commits by itself) and in a transaction
// of one job each, with and without the QueryHook, by one goroutine and
// by eight.
func TestNotifyCost(t *testing.T) {
	skipUnlessLatency(t)
	dsn := dbtest.Scratch(t, "notifycost")
	db := dbtest.OpenDSN(t, dsn, 0)
	db.SetMaxIdleConns(16) // the 8 goroutines, and the background sender
	require.NoError(t, bunqueue.Migrate(t.Context(), db))
	clients := map[bool]*bunqueue.Client{}
	hooked := map[*bunqueue.Client]*bun.DB{}
	for _, notify := range []bool{true, false} {
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t), NoEnqueueNotify: !notify})
		require.NoError(t, err)
		clients[notify] = c
		hooked[c] = db.WithQueryHook(c.QueryHook())
	}
	ctx := context.Background()
	enqueue := map[string]func(c *bunqueue.Client) error{
		"*bun.DB": func(c *bunqueue.Client) error {
			_, err := c.Enqueue(ctx, db, latencyArgs{}, nil)
			return err
		},
		"bun.Tx": func(c *bunqueue.Client) error {
			return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := c.Enqueue(ctx, tx, latencyArgs{}, nil)
				return err
			})
		},
		"bun.Tx with the QueryHook": func(c *bunqueue.Client) error {
			return hooked[c].RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := c.Enqueue(ctx, tx, latencyArgs{}, nil)
				return err
			})
		},
	}
	rounds := envInt("BUNQUEUE_NOTIFY_COST_ROUNDS", 2000)
	for _, through := range []string{"*bun.DB", "bun.Tx", "bun.Tx with the QueryHook"} {
		for _, goroutines := range []int{1, 8} {
			took := map[bool][]time.Duration{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for i := range rounds / goroutines {
						notify := i%2 == 0
						began := time.Now()
						if err := enqueue[through](clients[notify]); err != nil {
							t.Error(err)
							return
						}
						d := time.Since(began)
						mu.Lock()
						took[notify] = append(took[notify], d)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			t.Logf("Enqueue through %s, %d goroutine(s), %d calls each way: with notify %s; without %s",
				through, goroutines, len(took[true]), quantiles(took[true]), quantiles(took[false]))
		}
	}
	_, err := db.NewRaw("DELETE FROM bunqueue_jobs").Exec(ctx)
	require.NoError(t, err)
}

// quantiles says p50, p90, p99 and the maximum of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s (n=%d)", r(q(0.50)), r(q(0.90)), r(q(0.99)), r(s[len(s)-1]), len(s))
}
