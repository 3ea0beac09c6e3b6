// Package apppool runs the app's code (handlers, workers, lifecycle
// hooks, OnError, Backoff, and the queue's query function and the
// model's scanners inside claims and reads) so that whatever it does
// (panic, call runtime.Goexit, return an error that cannot be read) it
// fails its item or its batch, never the process, nor the worker that
// called it. It calls only the standard library.
package apppool

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Errors says what a contained call that did not return comes back as.
type Errors struct {
	// Panic returns the error of a call that panicked with value, the
	// goroutine's stack at the panic being stack.
	Panic func(value any, stack []byte) error
	// Goexit is the error of a call that ended its goroutine
	// (runtime.Goexit).
	Goexit error
}

// Call runs fn, the app's code for one item (a handler, a worker, a
// lifecycle hook, OnError), contained, and returns its error in a form
// the library can read: see Contain and Readable.
func Call(ctx context.Context, fn func() error, errs Errors) error {
	return Contain(ctx, func() error { return Readable(fn(), errs) }, errs)
}

// Contain runs fn in another goroutine and waits for it, so that the
// calling goroutine survives whatever fn does: a panic comes back as
// errs.Panic's error, a call of runtime.Goexit as errs.Goexit. The
// goroutine is one of a worker's (see Pool) when ctx carries its pool,
// else a new one.
func Contain(ctx context.Context, fn func() error, errs Errors) error {
	if p, _ := ctx.Value(poolKey{}).(*Pool); p != nil {
		return p.contain(fn, errs)
	}
	done := make(chan result, 1)
	go run(fn, errs, done)
	return (<-done).err
}

// result is what a contained call came to: its error, and whether its
// goroutine ended (runtime.Goexit) rather than return.
type result struct {
	err    error
	exited bool
}

// run runs fn and sends what it came to on done, whatever fn does.
func run(fn func() error, errs Errors, done chan<- result) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			done <- result{err: Readable(errs.Panic(r, debug.Stack()), errs)}
		} else if !returned {
			done <- result{err: errs.Goexit, exited: true}
		}
	}()
	err := fn()
	returned = true
	done <- result{err: err}
}

// Readable returns err if the library can read it, or the error of
// errs.Panic that says what could not be read. The library reads an
// item's error (its message, and its chain through errors.Is and
// errors.As) for spans, metrics, logs and the failed jobs; a method that
// panics there, as the Error method of a typed nil pointer often does,
// would otherwise crash the process from a worker's goroutine.
func Readable(err error, errs Errors) (safe error) {
	if err == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			safe = errs.Panic(fmt.Errorf("the %T it returned as its error cannot be read (a nil pointer?): %v", err, r), debug.Stack())
		}
	}()
	_ = err.Error()
	_ = errors.Is(err, errUnmatched)
	_ = errors.As(err, new(*unmatched))
	return err
}

// errUnmatched and unmatched are what no error is: errors.Is and errors.As
// walk an error's whole chain looking for them.
var errUnmatched = errors.New("bunqueue: no error is this one")

type unmatched struct{ error }

// A Pool keeps the goroutines that one worker runs the app's code in
// (see Contain), between calls. A goroutine started for each call begins
// with a small stack, which the app's code and the drivers beneath it
// grow by copying, call after call; a goroutine that is kept keeps its
// stack. A call that is made while another runs (a worker's call inside
// a batch's) gets a goroutine of its own; one whose code ended its
// goroutine (runtime.Goexit) is replaced at the next call. The zero Pool
// is ready to use.
type Pool struct {
	mu      sync.Mutex
	idle    []*goroutine
	stopped bool
}

// poolKey is the context key of a worker's Pool.
type poolKey struct{}

// With returns ctx carrying p, for Contain.
func With(ctx context.Context, p *Pool) context.Context {
	return context.WithValue(ctx, poolKey{}, p)
}

// goroutine is one goroutine of a Pool, waiting for calls.
type goroutine struct {
	calls chan call
	done  chan result
}

// call is one call a goroutine runs: the app's code and what its panic
// and Goexit come back as.
type call struct {
	fn   func() error
	errs Errors
}

// contain runs fn on an idle goroutine of the pool, or a new one.
func (p *Pool) contain(fn func() error, errs Errors) error {
	g := p.get()
	g.calls <- call{fn: fn, errs: errs}
	r := <-g.done
	if !r.exited {
		p.put(g)
	}
	return r.err
}

// get takes an idle goroutine, or starts one.
func (p *Pool) get() *goroutine {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		g := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return g
	}
	p.mu.Unlock()
	g := &goroutine{calls: make(chan call), done: make(chan result, 1)}
	go g.serve()
	return g
}

// put gives g back to the pool, or ends it if the pool has stopped.
func (p *Pool) put(g *goroutine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		close(g.calls)
		return
	}
	p.idle = append(p.idle, g)
}

// Stop ends the idle goroutines, and those given back later.
func (p *Pool) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, g := range p.idle {
		close(g.calls)
	}
	p.idle = nil
}

// serve runs the calls sent to g until its channel closes, or until a
// call ends the goroutine.
func (g *goroutine) serve() {
	for c := range g.calls {
		run(c.fn, c.errs, g.done)
	}
}
