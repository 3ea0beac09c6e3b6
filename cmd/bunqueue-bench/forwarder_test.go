package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testServer listens on a loopback port and runs handle on each
// connection, which it closes after.
func testServer(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// startForwarder runs a forwarder to target with delay for the test.
func startForwarder(t *testing.T, target string, delay time.Duration) *forwarder {
	t.Helper()
	f, err := newForwarder(target, delay)
	require.NoError(t, err)
	go f.serve()
	t.Cleanup(func() { _ = f.close() })
	return f
}

// dial connects to the forwarder, closed at the test's end.
func dial(t *testing.T, f *forwarder) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
	return c
}

// echo copies what it reads back, until the end of the stream.
func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// TestForwarderIntact sends a megabyte of random bytes, in writes of
// random sizes, through a forwarder with a delay to an echo server, and
// reads it back while it is still sending: every byte arrives, in order,
// both ways, and the end of the stream comes through too.
func TestForwarderIntact(t *testing.T) {
	t.Parallel()
	f := startForwarder(t, testServer(t, echo), time.Millisecond)
	c := dial(t, f)
	sent := make([]byte, 1<<20)
	for i := range sent {
		sent[i] = byte(rand.IntN(256))
	}
	errc := make(chan error, 1)
	go func() {
		rest := sent
		for len(rest) > 0 {
			n := min(len(rest), 1+rand.IntN(20000))
			if _, err := c.Write(rest[:n]); err != nil {
				errc <- err
				return
			}
			rest = rest[n:]
		}
		errc <- c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c) // to the echo server's end of stream
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, len(sent), len(got))
	require.True(t, bytes.Equal(sent, got), "the bytes came back changed or out of order")
}

// TestForwarderDelay checks that a request and its answer through a
// forwarder with a delay d take at least 2·d: d each way. Only the lower
// bound: a loaded machine may take longer.
func TestForwarderDelay(t *testing.T) {
	t.Parallel()
	const d = 5 * time.Millisecond
	f := startForwarder(t, testServer(t, echo), d)
	c := dial(t, f)
	buf := make([]byte, 4)
	for range 5 {
		began := time.Now()
		_, err := c.Write([]byte("ping"))
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(began), 2*d)
		require.Equal(t, "ping", string(buf))
	}
}

// TestForwarderRoundTrips counts the round trips of a scripted exchange
// on two connections: a request and its answer; a request answered in
// two writes; two requests sent without waiting (one round trip); and, on
// a connection whose server speaks first, one request.
func TestForwarderRoundTrips(t *testing.T) {
	t.Parallel()
	script := func(c net.Conn) {
		read := func(n int) string {
			buf := make([]byte, n)
			if _, err := io.ReadFull(c, buf); err != nil {
				return ""
			}
			return string(buf)
		}
		switch read(1) {
		case "A":
			_, _ = c.Write([]byte("a"))
			if read(1) != "B" {
				return
			}
			_, _ = c.Write([]byte("b1"))
			time.Sleep(2 * time.Millisecond)
			_, _ = c.Write([]byte("b2"))
			if read(2) != "CD" { // both, before answering
				return
			}
			_, _ = c.Write([]byte("cd"))
		}
	}
	greeter := func(c net.Conn) {
		_, _ = c.Write([]byte("hello"))
		script(c)
	}
	f := startForwarder(t, testServer(t, script), time.Millisecond)
	c := dial(t, f)
	exchange := func(c net.Conn, want string, send ...string) {
		t.Helper()
		for _, s := range send {
			_, err := c.Write([]byte(s))
			require.NoError(t, err)
			time.Sleep(time.Millisecond) // so that C and D may come as two reads
		}
		got := make([]byte, len(want))
		_, err := io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
	exchange(c, "a", "A")
	require.Equal(t, int64(1), f.stats().RoundTrips, "the connection's first request")
	exchange(c, "b1b2", "B")
	require.Equal(t, int64(2), f.stats().RoundTrips, "an answer in two writes")
	exchange(c, "cd", "C", "D")
	require.Equal(t, int64(3), f.stats().RoundTrips, "two requests sent without waiting")

	g := startForwarder(t, testServer(t, greeter), time.Millisecond)
	c2 := dial(t, g)
	exchange(c2, "hello")
	require.Zero(t, g.stats().RoundTrips, "the server's greeting")
	exchange(c2, "a", "A")
	require.Equal(t, forwarderStats{RoundTrips: 1, Conns: 1}, g.stats())
	require.Equal(t, forwarderStats{RoundTrips: 3, Conns: 1}, f.stats())
}
