package histsql

import (
	"sync"
	"time"
)

// Pending is what a process counted since its last flush to the history
// table, by queue. The zero value is ready to use; it is safe for
// concurrent use.
type Pending struct {
	mu sync.Mutex
	m  map[string]*Counts
}

// queue returns queue's counts. Call with p.mu held.
func (p *Pending) queue(name string) *Counts {
	if p.m == nil {
		p.m = map[string]*Counts{}
	}
	c := p.m[name]
	if c == nil {
		c = &Counts{}
		p.m[name] = c
	}
	return c
}

// Done counts items of queue that finished: processed completed, failed
// failed.
func (p *Pending) Done(queue string, processed, failed int) {
	if processed == 0 && failed == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.queue(queue)
	c.Processed += int64(processed)
	c.Failed += int64(failed)
}

// Started counts the start of a job of queue that had waited d.
func (p *Pending) Started(queue string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.queue(queue)
	c.Started++
	c.Waits[WaitBucket(d)]++
	c.WaitMaxMicros = max(c.WaitMaxMicros, d.Microseconds())
}

// Take returns the counts and starts anew; nil when nothing was counted,
// so that an idle process writes nothing.
func (p *Pending) Take() map[string]*Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.m
	p.m = nil
	return m
}

// Return adds back counts that Take returned and that could not be
// written, to be written with the next flush.
func (p *Pending) Return(m map[string]*Counts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, c := range m {
		p.queue(q).Merge(c)
	}
}
