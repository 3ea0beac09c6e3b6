package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// The library calls the app's code from goroutines of its own: handlers,
// workers, lifecycle hooks, OnError, Backoff, and, inside the claims and
// the feed's reads, the queue's query function and the model's scanners.
// Whatever that code does (panic, call runtime.Goexit, return an error
// that cannot be read), it must fail its item or its batch, never the
// process, nor the worker that called it.

// callApp runs fn, the app's code for one item (a handler, a worker,
// a lifecycle hook, OnError), and returns its error in a form the library
// can read: see contain and readable.
func callApp(ctx context.Context, fn func() error) error {
	return contain(ctx, func() error { return readable(fn()) })
}

// contain runs fn in another goroutine and waits for it, so that the
// calling goroutine survives whatever fn does: a panic comes back as a
// *PanicError, a call of runtime.Goexit as ErrGoexit. The goroutine is
// one of the worker's (see appPool) when ctx carries its pool, else a
// new one.
func contain(ctx context.Context, fn func() error) error {
	if p, _ := ctx.Value(appPoolKey{}).(*appPool); p != nil {
		return p.contain(fn)
	}
	done := make(chan appResult, 1)
	go runContained(fn, done)
	return (<-done).err
}

// appResult is what a contained call came to: its error, and whether its
// goroutine ended (runtime.Goexit) rather than return.
type appResult struct {
	err    error
	exited bool
}

// runContained runs fn and sends what it came to on done, whatever fn
// does.
func runContained(fn func() error, done chan<- appResult) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			done <- appResult{err: readable(&PanicError{Value: r, Stack: debug.Stack()})}
		} else if !returned {
			done <- appResult{err: ErrGoexit, exited: true}
		}
	}()
	err := fn()
	returned = true
	done <- appResult{err: err}
}

// An appPool keeps the goroutines that one worker runs the app's code in
// (see contain), between calls. A goroutine started for each call begins
// with a small stack, which the app's code and the drivers beneath it
// grow by copying, call after call; a goroutine that is kept keeps its
// stack. A call that is made while another runs (a worker's call inside
// a batch's) gets a goroutine of its own; one whose code ended its
// goroutine (runtime.Goexit) is replaced at the next call.
type appPool struct {
	mu      sync.Mutex
	idle    []*appGoroutine
	stopped bool
}

// appPoolKey is the context key of a worker's appPool.
type appPoolKey struct{}

// withAppPool returns ctx carrying p, for contain.
func withAppPool(ctx context.Context, p *appPool) context.Context {
	return context.WithValue(ctx, appPoolKey{}, p)
}

// appGoroutine is one goroutine of an appPool, waiting for calls.
type appGoroutine struct {
	calls chan func() error
	done  chan appResult
}

// contain runs fn on an idle goroutine of the pool, or a new one.
func (p *appPool) contain(fn func() error) error {
	g := p.get()
	g.calls <- fn
	r := <-g.done
	if !r.exited {
		p.put(g)
	}
	return r.err
}

// get takes an idle goroutine, or starts one.
func (p *appPool) get() *appGoroutine {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		g := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return g
	}
	p.mu.Unlock()
	g := &appGoroutine{calls: make(chan func() error), done: make(chan appResult, 1)}
	go g.serve()
	return g
}

// put gives g back to the pool, or ends it if the pool has stopped.
func (p *appPool) put(g *appGoroutine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		close(g.calls)
		return
	}
	p.idle = append(p.idle, g)
}

// stop ends the idle goroutines, and those given back later.
func (p *appPool) stop() {
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
func (g *appGoroutine) serve() {
	for fn := range g.calls {
		runContained(fn, g.done)
	}
}

// readable returns err if the library can read it, or a *PanicError that
// says what could not be read. The library reads an item's error (its
// message, and its chain through errors.Is and errors.As) for spans,
// metrics, logs and the failed jobs; a method that panics there, as the
// Error method of a typed nil pointer often does, would otherwise crash
// the process from a worker's goroutine.
func readable(err error) (safe error) {
	if err == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			safe = &PanicError{
				Value: fmt.Errorf("the %T it returned as its error cannot be read (a nil pointer?): %v", err, r),
				Stack: debug.Stack(),
			}
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
