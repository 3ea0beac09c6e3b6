package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/bunqueue/bunqueue"
)

// childCommand is the internal subcommand the bench re-executes its own
// binary with, for the scenarios that need a second process. It is not in
// the usage text.
const childCommand = "bench-child"

// childReport is what a child prints on stdout: one JSON object.
type childReport struct {
	// memory
	Processed  int64   `json:"processed,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	PeakRSSKiB int64   `json:"peak_rss_kib,omitempty"` // VmHWM
	RSSKiB     int64   `json:"rss_kib,omitempty"`      // VmRSS at the end

	// enqueue
	Enqueued     int64    `json:"enqueued,omitempty"`
	InWindow     int64    `json:"in_window,omitempty"`
	WindowS      float64  `json:"window_s,omitempty"`
	EnqueueP50ms *float64 `json:"enqueue_p50_ms,omitempty"`
	EnqueueP99ms *float64 `json:"enqueue_p99_ms,omitempty"`
	// Returned is, for each job enqueued in the window, when its Enqueue
	// returned (Unix nanoseconds), by job id: its commit was behind it.
	Returned map[int64]int64 `json:"returned_unix_ns,omitempty"`
	// Notifies are the start and end (Unix nanoseconds) of each statement
	// that sent notifications, over the whole run.
	Notifies [][2]int64 `json:"notifies_unix_ns,omitempty"`
	// Called is, for each row inserted in the window (rows), when its
	// transaction began (Unix nanoseconds), by id.
	Called map[int64]int64 `json:"called_unix_ns,omitempty"`

	// both: what the child's client counted (see result)
	TxRetries     int64 `json:"tx_retries,omitempty"`
	FailedBatches int64 `json:"failed_batches,omitempty"`
	Handled       int64 `json:"handled,omitempty"`
	Reruns        int64 `json:"handler_reruns,omitempty"`
}

// runChild runs "bunqueue-bench bench-child memory|enqueue|rows [flags]" (internal:
// started by the bench). The DSN comes from BUNQUEUE_MYSQL_DSN, so that it
// does not show in the process list. "bench-child proxy" runs the
// forwarder instead (proxychild.go), controlled through its stdin.
func runChild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == proxyMode {
		return runProxyChild(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) == 0 || (args[0] != "memory" && args[0] != "enqueue" && args[0] != "rows") {
		fmt.Fprintln(stderr, "Usage: bunqueue-bench "+childCommand+" memory|enqueue|rows|"+proxyMode+" [flags] (internal: started by bunqueue-bench)")
		return exitUsage
	}
	fs := flag.NewFlagSet(childCommand+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	warmup := fs.Duration("warmup", time.Second, "run before the measured window")
	duration := fs.Duration("duration", 3*time.Second, "the measured window")
	batch := fs.Int("batch", 50, "memory: the queue's BatchSize")
	queue := fs.String("queue", "", "enqueue: the jobs queue")
	rate := fs.Int("rate", 300, "enqueue, rows: enqueues per second")
	noPrepared := fs.Bool("no-prepared", false, "Config.NoPreparedStatements")
	if code := parseFlags(fs, args[1:]); code >= 0 {
		return code
	}
	b := newBench(dsnFrom(""), stderr)
	b.duration, b.warmup, b.noPrepared = *duration, *warmup, *noPrepared
	var rep childReport
	var err error
	switch args[0] {
	case "memory":
		rep, err = b.childMemory(ctx, *batch)
	case "enqueue":
		if *queue == "" || *rate <= 0 {
			fmt.Fprintln(stderr, "enqueue: --queue and a positive --rate are required")
			return exitUsage
		}
		rep, err = b.childEnqueue(ctx, *queue, *rate)
	case "rows":
		rep, err = b.childRows(ctx, *rate)
	}
	if err == nil {
		err = b.scene.report(ctx, &rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench %s %s: %v\n", childCommand, args[0], err)
		return exitError
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench %s: %v\n", childCommand, err)
		return exitError
	}
	return exitOK
}

// childMemory runs the any-table queue over bench_items (16 workers,
// BatchSize batch) for the warm-up and the window, and reports what it
// processed and its RSS.
func (b *bench) childMemory(ctx context.Context, batch int) (childReport, error) {
	db, err := b.open(ctx, poolSize)
	if err != nil {
		return childReport{}, err
	}
	defer db.Close()
	done := b.newTally()
	client, err := bunqueue.NewClient(db, b.config(bunqueue.Config{}))
	if err != nil {
		return childReport{}, err
	}
	if err := client.Add(b.itemsQueue(done, &bunqueue.QueueConfig[benchItem]{Workers: workers, BatchSize: batch})); err != nil {
		return childReport{}, err
	}
	began := time.Now()
	if _, err := b.runClient(ctx, client, &done.done, db); err != nil {
		return childReport{}, err
	}
	return childReport{
		Processed:  done.done.Load(),
		Seconds:    time.Since(began).Seconds(),
		PeakRSSKiB: readPeakRSS(),
		RSSKiB:     readRSS(),
	}, nil
}

// childEnqueue enqueues latencyJobs into queue at perSecond, one autocommit
// INSERT each, through a client that runs no workers.
func (b *bench) childEnqueue(ctx context.Context, queue string, perSecond int) (childReport, error) {
	db, err := b.open(ctx, 4)
	if err != nil {
		return childReport{}, err
	}
	defer db.Close()
	sends := &sendClock{}
	db.AddQueryHook(sends)
	client, err := bunqueue.NewClient(db, b.config(bunqueue.Config{
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {}},
	}))
	if err != nil {
		return childReport{}, err
	}
	opts := &bunqueue.EnqueueOpts{Queue: queue}
	returned := map[int64]int64{}
	p, err := b.produce(ctx, perSecond, false, func(ctx context.Context, job latencyJob) error {
		res, err := client.Enqueue(ctx, db, job, opts)
		if err == nil && job.Measured {
			returned[res.ID] = time.Now().UnixNano()
		}
		return err
	})
	if err != nil {
		return childReport{}, err
	}
	rep := p.report()
	rep.Returned, rep.Notifies = returned, sends.settled(ctx)
	return rep, nil
}

// selfExe returns the path to run this program's own binary: on Linux
// /proc/self/exe, which stays this very binary even if its file is
// replaced (rebuilt) while the bench runs; elsewhere os.Executable.
func selfExe() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// childProc is a running child.
type childProc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
}

// runProducer runs a child that produces perSecond a second with the
// bench's warm-up and duration (the command, then args), and returns its
// report.
func (b *bench) runProducer(ctx context.Context, command string, perSecond int, args ...string) (childReport, error) {
	args = append([]string{command, "--rate", fmt.Sprint(perSecond), "--warmup", b.warmup.String(), "--duration", b.duration.String()}, args...)
	p, err := b.startChild(ctx, args...)
	if err != nil {
		return childReport{}, err
	}
	return p.wait()
}

// startChild starts this binary's bench-child subcommand with args, with
// the bench's DSN in its environment. The child's stderr (its warnings) is
// copied to the bench's progress output too.
func (b *bench) startChild(ctx context.Context, args ...string) (*childProc, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, fmt.Errorf("find this program to run it as a child: %w", err)
	}
	if b.noPrepared {
		args = append(args, "--no-prepared")
	}
	p := &childProc{cmd: exec.CommandContext(ctx, exe, append([]string{childCommand}, args...)...)}
	p.cmd.Env = append(os.Environ(), "BUNQUEUE_MYSQL_DSN="+b.dsn)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = io.MultiWriter(&p.stderr, b.progress)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the child process: %w", err)
	}
	return p, nil
}

// wait waits for the child and returns its report.
func (p *childProc) wait() (childReport, error) {
	if err := p.cmd.Wait(); err != nil {
		return childReport{}, fmt.Errorf("the child process %s failed: %w: %s", strings.Join(p.cmd.Args[1:3], " "), err, strings.TrimSpace(p.stderr.String()))
	}
	var rep childReport
	if err := json.Unmarshal(p.stdout.Bytes(), &rep); err != nil {
		return childReport{}, fmt.Errorf("the child process's report %q: %w", p.stdout.String(), err)
	}
	return rep, nil
}

// memory fills bench_items with rows waiting rows and has a child process,
// which does nothing but the queue's work, run the queue (16 workers,
// BatchSize 50) over them for the warm-up and the window; the row reports
// the child's peak RSS.
func (b *bench) memory(ctx context.Context, rows int) (result, error) {
	db, err := b.open(ctx, 4)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	defer dropTables(db, itemsTable)
	if _, err := b.createItems(ctx, db, rows); err != nil {
		return result{}, err
	}
	p, err := b.startChild(ctx, "memory", "--batch", "50", "--warmup", b.warmup.String(), "--duration", b.duration.String())
	if err != nil {
		return result{}, err
	}
	rep, err := p.wait()
	if err != nil {
		return result{}, err
	}
	b.scene.addChild(rep)
	note := fmt.Sprintf("RSS: the child process's peak (VmHWM; %.1f MiB at its end); 16 workers, BatchSize 50, %d waiting rows, %d processed in %.1f s",
		float64(rep.RSSKiB)/1024, rows, rep.Processed, rep.Seconds)
	if rows != 1000 && rows != largeFull {
		note += fmt.Sprintf(" [not %d: --quick or --large]", largeFull)
	}
	if base, ok := b.results["memory-1k"]; ok && rows != 1000 && base.RSSKiB > 0 {
		note += fmt.Sprintf("; peak RSS ×%.2f of memory-1k (goal within 20%%)", float64(rep.PeakRSSKiB)/float64(base.RSSKiB))
	}
	return result{ItemsPerSec: float64(rep.Processed) / rep.Seconds, RSSKiB: rep.PeakRSSKiB, Note: note}, nil
}
