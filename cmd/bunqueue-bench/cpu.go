package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file measures where a scenario's CPU goes: this process (the
// client: bunqueue, bun and the driver) and, when the server runs on this
// machine, the database server's processes. CPU time per item varies far
// less with a shared machine's load than items per second do, so it is how
// the bench compares two configurations (tracing on and off, say) whose
// rates differ by less than the noise.

// serverCommands are the process names of the servers whose CPU the bench
// reads from /proc.
var serverCommands = map[string]bool{"mariadbd": true, "mysqld": true, "postgres": true}

// cpuSample is the CPU time used so far by this process and by the local
// database server's processes.
type cpuSample struct {
	client time.Duration
	server time.Duration         // of every server process found
	procs  map[int]time.Duration // server, by process id
	local  bool                  // a server process was found
}

// readCPU samples this process's CPU time (user and system) and that of
// every process on this machine named like a database server. On a system
// without /proc the server part is missing.
func readCPU() cpuSample {
	s := cpuSample{client: selfCPU()}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !serverCommands[strings.TrimSpace(string(comm))] {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if t, ok := procCPU(filepath.Join(d, "stat")); ok && err == nil {
			if s.procs == nil {
				s.procs = map[int]time.Duration{}
			}
			s.procs[pid] = t
			s.server += t
			s.local = true
		}
	}
	return s
}

// selfCPU returns the CPU time (user and system) this process used so
// far, its children not counted.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on Linux on every architecture Go supports.
const clockTicks = 100

// procCPU returns utime + stime from a /proc/PID/stat file.
func procCPU(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: count the
	// fields after its closing parenthesis. utime and stime are fields 14
	// and 15 of the line, the 12th and 13th after the name.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, true
}

// cpuPerItem is the CPU time, in microseconds, that one item cost the
// client and the server between two samples; server is nil when no local
// server process was found (a server on another machine, or one whose
// connections came and went: PostgreSQL's per-connection processes that
// exited between the samples take their time with them).
func cpuPerItem(a, b cpuSample, items int64) (client, server *float64) {
	if items <= 0 {
		return nil, nil
	}
	c := float64(b.client-a.client) / float64(time.Microsecond) / float64(items)
	client = &c
	if d, ok := serverDelta(a, b); ok {
		s := float64(d) / float64(time.Microsecond) / float64(items)
		server = &s
	}
	return client, server
}

// serverDelta returns the server's CPU time from a to b. It is counted per
// process: a process that ended in between (a PostgreSQL backend whose
// connection closed, of this run or another) takes its time out of the
// total, which must not make the difference negative; one that started
// counts from zero.
func serverDelta(a, b cpuSample) (time.Duration, bool) {
	if !a.local || !b.local {
		return 0, false
	}
	if a.procs == nil || b.procs == nil {
		return b.server - a.server, b.server >= a.server
	}
	var d time.Duration
	for pid, t := range b.procs {
		if t >= a.procs[pid] {
			d += t - a.procs[pid]
		}
	}
	return d, true
}
