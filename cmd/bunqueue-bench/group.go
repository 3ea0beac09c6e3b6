package main

import (
	"context"
	"sync"
)

// group runs functions on at most limit goroutines and keeps the first
// error, after which it cancels its context. A small errgroup, so that the
// command needs no module the library does not already require.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context, limit int) *group {
	ctx, cancel := context.WithCancel(ctx)
	return &group{ctx: ctx, cancel: cancel, sem: make(chan struct{}, limit)}
}

// Go runs f on a goroutine once fewer than limit are running.
func (g *group) Go(f func(ctx context.Context) error) {
	g.sem <- struct{}{}
	g.wg.Add(1)
	go func() {
		defer func() { <-g.sem; g.wg.Done() }()
		if err := f(g.ctx); err != nil {
			g.once.Do(func() { g.err = err; g.cancel() })
		}
	}()
}

// Wait waits for every function and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}
