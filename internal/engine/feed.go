package engine

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// A Feed hands the rows of one queue to its workers in this process.
//
// Claiming at the head of the queue's index is what limits a SKIP LOCKED
// queue: every claimer reads past the rows the others hold, and 16 claimers
// on one index head were slower than 4. So one goroutine per queue (fill)
// reads the primary keys of the next waiting rows with a plain read that
// locks nothing, and each worker locks the rows it takes by primary key,
// re-checking the queue's query under the lock. A row the read found but
// another process took meanwhile is skipped by that claim; one that left
// the queue no longer matches. Rows taken by this process's workers and
// not finished are busy: a later read that finds them again does not hand
// them out twice.
type Feed struct {
	r      *Queue
	window int // how many new rows one read tries to find

	mu    sync.Mutex
	ready []Key                // read, not yet taken
	busy  map[string]Key       // ready or taken, not yet finished
	late  map[string]struct{}  // finished since the current read began
	held  map[string]time.Time // found locked by a claim, and when
	// contended: when the current read began, rows found locked were
	// held back, as when other processes work the queue (see add).
	contended bool
	// waiters are the channels (cap 1) of the workers that found ready
	// empty, in the order they came: wake signals as many of them as
	// rows came, not every worker for one row.
	waiters []chan struct{}
	low     chan struct{} // cap 1: a worker found ready short: read again
	found   chan struct{} // cap 1: the idle watcher found rows (see idle.go)

	// perKey is the queue's KeyLimit, 0 without one; keyBusy counts, by
	// KeyLimit key, the batches taken and not yet done that hold rows of
	// it (see takeByKey).
	perKey  int
	keyBusy map[string]int
}

// minReadAhead is the fewest keys per worker one read of the Feed looks
// for. Two rounds of batches are few with batches of one: a read that
// waits for the CPU on a busy machine finds the workers at one row per
// transaction already waiting for it.
const minReadAhead = 16

// ReadComment tags a feed's read, so that it can be told apart in the
// server's process list and slow log.
func ReadComment(queue string) string { return "bunqueue: read " + queue }

// NewFeed returns the feed of q, and gives q a Gate if it has none.
func NewFeed(r *Queue) *Feed {
	f := &Feed{
		r:      r,
		window: max(2*r.Workers*r.Batch, minReadAhead*r.Workers),
		busy:   map[string]Key{},
		late:   map[string]struct{}{},
		held:   map[string]time.Time{},
		low:    make(chan struct{}, 1),
		found:  make(chan struct{}, 1),
	}
	if r.PerKey > 0 {
		f.perKey, f.keyBusy = r.PerKey, map[string]int{}
	}
	if r.Gate == nil {
		r.Gate = NewGate()
	}
	r.Gate.onPause = f.pause
	return f
}

// Queue returns the feed's queue.
func (f *Feed) Queue() *Queue { return f.r }

// pause drops the rows read and not yet taken, so that a paused queue
// starts no more, and wakes fill to wait for the resume.
func (f *Feed) pause() {
	f.mu.Lock()
	for _, k := range f.ready {
		delete(f.busy, k.ID)
	}
	f.ready = nil
	f.mu.Unlock()
	for _, ch := range []chan struct{}{f.low, f.found} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// take removes up to n rows from ready, at most a fair share of them for
// each worker, and returns them; if it has none for the worker, it adds
// the worker's channel wake (cap 1) to the waiters, which get a signal
// when rows come. It asks fill to read again when fewer than half a
// read's window is left.
func (f *Feed) take(n int, wake chan struct{}) []Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	share := (len(f.ready) + f.r.Workers - 1) / f.r.Workers
	var got []Key
	if f.perKey > 0 {
		got = f.takeByKey(min(n, share))
	} else {
		k := min(n, share)
		got = f.ready[:k:k]
		f.ready = f.ready[k:]
	}
	k := len(got)
	if len(f.ready) < f.window/2 {
		select {
		case f.low <- struct{}{}:
		default:
		}
	}
	if k == 0 {
		if !slices.Contains(f.waiters, wake) {
			f.waiters = append(f.waiters, wake)
		}
		return nil
	}
	return got
}

// wakeLocked signals up to n of the waiting workers, those that waited
// longest first. Call with f.mu held.
func (f *Feed) wakeLocked(n int) {
	n = min(n, len(f.waiters))
	for _, ch := range f.waiters[:n] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	f.waiters = slices.Delete(f.waiters, 0, n)
}

// takeByKey removes up to n rows from ready for one batch of a queue with
// a KeyLimit, and returns them. A key's rows run one after the other in
// a batch under one slot, and each batch that holds a key takes one of
// its KeyLimit slots: the workers of this process would only meet on a
// key whose slots their batches hold, each claim leaving out the rows it
// found no slot for. So a batch takes no row of a key that KeyLimit
// batches of this process hold already, and takes the rows of its keys
// together, at most a fair share of the keys that are free (the free
// keys among the ready rows, shared among the workers). The rows it
// leaves keep their order in ready. Call with f.mu held; done gives the
// batch's keys back.
func (f *Feed) takeByKey(n int) []Key {
	free := map[string]bool{}
	for _, k := range f.ready {
		if k.LimitKey != "" && f.keyBusy[k.LimitKey] < f.perKey {
			free[k.LimitKey] = true
		}
	}
	most := max((len(free)+f.r.Workers-1)/f.r.Workers, 1)
	mine := map[string]bool{}
	var got []Key
	left := f.ready[:0]
	for _, k := range f.ready {
		take := false
		switch {
		case len(got) >= n:
		case k.LimitKey == "" || mine[k.LimitKey]:
			take = true
		case free[k.LimitKey] && len(mine) < most:
			mine[k.LimitKey], take = true, true
		}
		if take {
			got = append(got, k)
		} else {
			left = append(left, k)
		}
	}
	clear(f.ready[len(left):])
	f.ready = left
	for key := range mine {
		f.keyBusy[key]++
	}
	return got
}

// done gives back the KeyLimit keys of a batch that took keys (see
// takeByKey), and wakes the workers waiting for rows if some are ready:
// rows of those keys may be.
func (f *Feed) done(keys []Key) {
	if f.perKey == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, k := range keys {
		if k.LimitKey == "" || seen[k.LimitKey] {
			continue
		}
		seen[k.LimitKey] = true
		if f.keyBusy[k.LimitKey]--; f.keyBusy[k.LimitKey] <= 0 {
			delete(f.keyBusy, k.LimitKey)
		}
	}
	f.wakeLocked(len(f.ready))
}

// heldFor is how long the Feed leaves alone a row that a claim found
// locked by another transaction (another process's worker, or an insert
// not yet committed, which the read may see at READ UNCOMMITTED), unless
// a commit in this process wakes the Feed first. Without it, a queue whose
// only waiting rows are held elsewhere would read and claim them again and
// again, finding them locked each time.
const heldFor = 100 * time.Millisecond

// finish marks rows no longer busy: a later read may hand them out again.
// Those of them that res, the batch's result, did not lock (held by
// another transaction, or gone) are held for heldFor.
func (f *Feed) finish(keys []Key, res Result) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		delete(f.busy, k.ID)
		f.late[k.ID] = struct{}{}
		if res.Err == nil && !slices.Contains(res.Got, k.ID) {
			f.held[k.ID] = now
		}
	}
}

// putBack hands rows that a worker took but did not try to claim (its
// queue's RateLimit had no slot for them) back to the workers, at the
// head of ready: they are still busy, and no read needs to find them
// again. A paused queue drops them instead (see pause).
func (f *Feed) putBack(keys []Key) {
	if len(keys) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r.Gate.Paused() {
		for _, k := range keys {
			delete(f.busy, k.ID)
		}
		return
	}
	f.ready = append(slices.Clone(keys), f.ready...)
	f.wakeLocked(len(keys))
}

// release forgets the held rows: a commit in this process may have
// released them.
func (f *Feed) release() {
	f.mu.Lock()
	clear(f.held)
	f.mu.Unlock()
}

// inFlight returns the busy rows, for the idle watcher's probe to leave
// out; none if there are more than probeExcept.
func (f *Feed) inFlight() []Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.busy) > probeExcept {
		return nil
	}
	keys := make([]Key, 0, len(f.busy))
	for _, k := range f.busy {
		keys = append(keys, k)
	}
	return keys
}

// add appends the rows of a read that are not busy to ready, and reports
// how many it added.
//
// Under contention, it appends them from a random one on, wrapping
// around: the feeds of other processes read the same rows, in the same
// order, and workers that take them in that order meet on every row,
// each claim getting what the others left. Taken from different starts,
// each process's workers mostly find rows that no other process has
// reached. The queue's order is kept between reads, not within one.
func (f *Feed) add(found []Key) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r.Gate.Paused() {
		return 0 // read before a pause: see pause
	}
	if f.contended && len(found) > 1 {
		s := rand.IntN(len(found))
		found = append(found[s:len(found):len(found)], found[:s]...)
	}
	n := 0
	for _, k := range found {
		if _, ok := f.busy[k.ID]; ok {
			continue
		}
		if _, ok := f.late[k.ID]; ok {
			// Finished while the read ran: it may have seen the row
			// before the commit that took it out of the queue.
			continue
		}
		if _, ok := f.held[k.ID]; ok {
			continue
		}
		f.busy[k.ID] = k
		f.ready = append(f.ready, k)
		n++
	}
	f.wakeLocked(n)
	return n
}

// begin starts a read: it returns how many keys to ask for (enough to
// get past the busy rows, which the read may find again, to window new
// ones, rounded up to a quarter of the window: the read's text, whose
// LIMIT it is, then recurs, and a driver that caches statements by their
// text, as pgx does, finds it there) and forgets the rows that finished
// before now, which the read will see as they are.
func (f *Feed) begin() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.late)
	for id, at := range f.held {
		if time.Since(at) >= heldFor {
			delete(f.held, id)
		}
	}
	f.contended = len(f.held) > 0
	step := max(f.window/4, minReadAhead)
	n := len(f.busy) + len(f.held) + f.window
	return (n + step - 1) / step * step
}

// HandOver adds k, a row that was just committed, to ready, unless the
// queue is paused or the row is the feed's already, and wakes a worker.
func (f *Feed) HandOver(k Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r.Gate.Paused() {
		return
	}
	if _, ok := f.busy[k.ID]; ok {
		return
	}
	f.busy[k.ID] = k
	f.ready = append(f.ready, k)
	f.wakeLocked(1)
}
