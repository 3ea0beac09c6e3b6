package engine

import "sync"

// Gate is whether a started queue is paused.
type Gate struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed while not paused
	onPause func()        // drops the feed's rows not yet taken
}

// NewGate returns the gate of a queue that is not paused.
func NewGate() *Gate {
	g := &Gate{resumed: make(chan struct{})}
	close(g.resumed)
	return g
}

// Set pauses or resumes the queue; it reports whether that changed it.
func (g *Gate) Set(paused bool) bool {
	g.mu.Lock()
	if g.paused == paused {
		g.mu.Unlock()
		return false
	}
	g.paused = paused
	if paused {
		g.resumed = make(chan struct{})
	} else {
		close(g.resumed)
	}
	onPause := g.onPause
	g.mu.Unlock()
	if paused && onPause != nil {
		onPause()
	}
	return true
}

// wait returns a channel closed when the queue is not paused.
func (g *Gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resumed
}

// Paused reports whether the queue is paused.
func (g *Gate) Paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}
