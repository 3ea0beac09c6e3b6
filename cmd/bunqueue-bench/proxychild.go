package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// This file runs the forwarder (forwarder.go) in a child process, this
// binary again, and reads its counts from the bench: the client CPU
// column is this process's, and the forwarder's CPU must not be in it.
//
// The child's protocol, on its stdin and stdout, one line each: it
// prints {"addr": "127.0.0.1:PORT"} once it listens; for each line
// "stats" it reads, it prints a proxyStats object; at the end of its
// stdin (the bench closed it, or ended) it exits.

// proxyMode is the bench-child mode that runs the forwarder.
const proxyMode = "proxy"

// proxyStopWait is how long the bench waits for the forwarder's process
// to exit after closing its stdin, before it kills it.
const proxyStopWait = 5 * time.Second

// proxyStats is what the forwarder's process reports: its counts, and its
// own CPU time (user and system) so far.
type proxyStats struct {
	forwarderStats
	CPUus int64 `json:"cpu_us"`
}

// proxyHello is the forwarder process's first line.
type proxyHello struct {
	Addr string `json:"addr"`
}

// runProxyChild runs "bunqueue-bench bench-child proxy --target HOST:PORT
// --delay D" (internal: started by the bench).
func runProxyChild(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(childCommand+" "+proxyMode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "host:port of the database server")
	delay := fs.Duration("delay", 0, "added to each chunk, each way")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *target == "" {
		fmt.Fprintln(stderr, proxyMode+": --target is required")
		return exitUsage
	}
	f, err := newForwarder(*target, *delay)
	if err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench %s %s: %v\n", childCommand, proxyMode, err)
		return exitError
	}
	go f.serve()
	defer f.close()
	if err := serveProxyControl(f, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "bunqueue-bench %s %s: %v\n", childCommand, proxyMode, err)
		return exitError
	}
	return exitOK
}

// serveProxyControl prints f's address, then answers each "stats" line
// of in with f's counts, until in ends.
func serveProxyControl(f *forwarder, in io.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	if err := enc.Encode(proxyHello{Addr: f.addr()}); err != nil {
		return fmt.Errorf("print the address: %w", err)
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if cmd := strings.TrimSpace(sc.Text()); cmd != "stats" {
			return fmt.Errorf("unknown command %q", cmd)
		}
		if err := enc.Encode(proxyStats{forwarderStats: f.stats(), CPUus: selfCPU().Microseconds()}); err != nil {
			return fmt.Errorf("print the stats: %w", err)
		}
	}
	return sc.Err()
}

// proxyProc is the bench's handle on a forwarder's process.
type proxyProc struct {
	delay time.Duration
	addr  string // the forwarder's, for the clients

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr strings.Builder

	mu sync.Mutex // one request at a time
}

// startProxy starts a forwarder's process to target with delay, and
// waits until it listens.
func startProxy(ctx context.Context, target string, delay time.Duration) (*proxyProc, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, fmt.Errorf("find this program to run the forwarder: %w", err)
	}
	p := &proxyProc{delay: delay}
	p.cmd = exec.CommandContext(ctx, exe, childCommand, proxyMode, "--target", target, "--delay", delay.String())
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("the forwarder's stdin: %w", err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("the forwarder's stdout: %w", err)
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the forwarder's process: %w", err)
	}
	var hello proxyHello
	if err := p.readLine(&hello); err != nil {
		_ = p.stop()
		return nil, err
	}
	p.addr = hello.Addr
	return p, nil
}

// readLine reads the forwarder's next line into v.
func (p *proxyProc) readLine(v any) error {
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("the forwarder's process: %w: %s", err, strings.TrimSpace(p.stderr.String()))
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("the forwarder's line %q: %w", line, err)
	}
	return nil
}

// stats asks the forwarder for its counts so far.
func (p *proxyProc) stats() (proxyStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s proxyStats
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		return s, fmt.Errorf("ask the forwarder for its counts: %w", err)
	}
	return s, p.readLine(&s)
}

// stop ends the forwarder's process: it closes its stdin, which the
// process exits at, and kills it if it has not after proxyStopWait.
func (p *proxyProc) stop() error {
	_ = p.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("the forwarder's process: %w: %s", err, strings.TrimSpace(p.stderr.String()))
		}
		return nil
	case <-time.After(proxyStopWait):
		_ = p.cmd.Process.Kill()
		<-exited
		return errors.New("the forwarder's process did not exit when told: killed")
	}
}
