package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the bench's delaying TCP forwarder: it stands between the
// clients and the database server, as a network between two hosts would,
// and counts the round trips on the wire. The bench runs it in a child
// process (proxychild.go), so that its CPU is not the client's.

// chunkQueue is how many chunks read from one side may wait for their
// delivery time: far more than a millisecond's worth, so that the queue
// never throttles a pipelined stream.
const chunkQueue = 4096

// readBufSize is the most one read takes from a socket.
const readBufSize = 64 << 10

// dialTimeout bounds the forwarder's connection to the server.
const dialTimeout = 10 * time.Second

// forwarder accepts connections on a loopback port and forwards each to
// target, delivering every chunk it reads, in either direction, delay
// after it read it. A reader goroutine per direction timestamps the
// chunks and queues them; a writer goroutine sleeps until each one's time
// and writes it: the delay adds latency, not a limit on throughput, and
// pipelined requests stay pipelined.
type forwarder struct {
	target string
	delay  time.Duration
	ln     net.Listener

	roundTrips atomic.Int64 // over every connection, see fwdConn
	conns      atomic.Int64 // connections accepted

	wg sync.WaitGroup // the connections being served
}

// newForwarder listens on 127.0.0.1 at a port the system picks, for
// target (host:port) with delay each way. serve runs it.
func newForwarder(target string, delay time.Duration) (*forwarder, error) {
	if delay < 0 {
		return nil, fmt.Errorf("forwarder: negative delay %s", delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forwarder: listen: %w", err)
	}
	return &forwarder{target: target, delay: delay, ln: ln}, nil
}

// addr is the address the clients connect to.
func (f *forwarder) addr() string { return f.ln.Addr().String() }

// serve accepts connections until close, and serves each on goroutines
// of its own.
func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.conns.Add(1)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c)
		}()
	}
}

// close stops accepting connections. The ones open go on until either
// side closes them.
func (f *forwarder) close() error { return f.ln.Close() }

// forwarderStats is what a forwarder counted so far.
type forwarderStats struct {
	RoundTrips int64 `json:"round_trips"`
	Conns      int64 `json:"conns"`
}

// stats returns the forwarder's counts; safe at any time.
func (f *forwarder) stats() forwarderStats {
	return forwarderStats{RoundTrips: f.roundTrips.Load(), Conns: f.conns.Load()}
}

// fwdConn is one client's connection through the forwarder. It counts
// the round trips on the wire: a chunk from the client counts one when
// the server sent something since the client's previous chunk, or when
// it is the connection's first. Chunks the client sends without waiting
// for an answer (a pipeline, a message split over two reads) count once.
type fwdConn struct {
	f        *forwarder
	answered atomic.Bool // the server sent something since the client's last chunk
}

// fromClient counts a chunk read from the client.
func (c *fwdConn) fromClient() {
	if c.answered.Swap(false) {
		c.f.roundTrips.Add(1)
	}
}

// fromServer notes a chunk read from the server.
func (c *fwdConn) fromServer() { c.answered.Store(true) }

// forward connects client to the target and copies both ways until both
// directions ended.
func (f *forwarder) forward(client net.Conn) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", f.target, dialTimeout)
	if err != nil {
		return // the client sees its connection closed
	}
	defer server.Close()
	c := &fwdConn{f: f}
	c.answered.Store(true) // the first chunk from the client counts
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		f.pipe(client, server, c.fromClient)
	}()
	go func() {
		defer wg.Done()
		f.pipe(server, client, c.fromServer)
	}()
	wg.Wait()
}

// chunk is what one read returned, and when.
type chunk struct {
	data []byte
	read time.Time
}

// pipe copies src to dst, each chunk f.delay after it was read; onRead is
// called for each chunk as it is read. When src ends, dst's write side is
// closed once every chunk was delivered; when a write fails, both
// connections are closed, which ends the other direction too.
func (f *forwarder) pipe(src, dst net.Conn, onRead func()) {
	chunks := make(chan chunk, chunkQueue)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		f.deliver(src, dst, chunks)
	}()
	buf := make([]byte, readBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			onRead()
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), read: time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(chunks)
	<-delivered
}

// deliver writes each chunk to dst at its time, then closes dst's write
// side. After a failed write it closes src and dst and drops the rest.
func (f *forwarder) deliver(src, dst net.Conn, chunks <-chan chunk) {
	for c := range chunks {
		if wait := time.Until(c.read.Add(f.delay)); f.delay > 0 && wait > 0 {
			preciseSleep(wait)
		}
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close()
			_ = dst.Close()
			for range chunks {
			}
			return
		}
	}
	closeWrite(dst)
}

// closeWrite half-closes c, so that its peer reads an end of stream while
// the other direction goes on; a connection that cannot is closed.
func closeWrite(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
		return
	}
	_ = c.Close()
}
