package main

import (
	"syscall"
	"time"
)

// preciseSleep sleeps for d in the calling thread, in nanosleep(2): the
// forwarder's delays are often under a millisecond, and Go's own timers
// on Linux, when the process has nothing else to run, wake no sooner than
// the next whole millisecond (the runtime waits in epoll_wait, whose
// timeout is in milliseconds): a delay of 250 µs took a millisecond.
// The goroutine holds its thread while it sleeps.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left
	}
}
