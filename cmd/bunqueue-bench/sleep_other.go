//go:build !linux

package main

import "time"

// preciseSleep sleeps for d: with Go's timers, which may overshoot by up
// to a millisecond (see sleep_linux.go).
func preciseSleep(d time.Duration) { time.Sleep(d) }
