// Package lease runs a jobs queue in lease mode (Runner): a short
// transaction claims and leases a batch of jobs, which then run outside
// any transaction; each is completed, failed or released through the
// finisher only while its lease is still the worker's, and quick ones
// are completed together (complete.go).
//
// Its Keeper keeps a batch's leases alive while its jobs wait and run:
// every Lease/3 it extends them, notices the jobs whose lease another
// worker took over, and cancels the running job when its lease is lost
// or about to end unextended. The Keeper calls nothing of the runner but
// the Extender it is given, which holds the SQL.
package lease

import (
	"context"
	"sync"
	"time"
)

// Extender pushes the leases of those of ids that the batch still holds
// (and of the limits' slots leased with them) to the lease's length from
// now, by the database clock, and returns the ids still held: none when
// a slot the jobs run under was lost.
type Extender func(ctx context.Context, ids []int64) (still []int64, err error)

// Keeper extends the leases of a batch while its jobs wait and run, and
// cancels a running job when its lease can no longer be vouched for.
type Keeper struct {
	lease  time.Duration
	extend Extender
	warn   func(ctx context.Context, err error)
	done   chan struct{}
	wg     sync.WaitGroup

	mu         sync.Mutex
	held       map[int64]bool // jobs still leased by this batch
	lost       map[int64]bool
	running    int64
	cancel     context.CancelFunc
	validUntil time.Time // local clock: the leases are good until then
}

// New returns the keeper of the leases of ids, of length lease,
// taken by a statement sent at claimed (local clock); extend extends
// them, and warn is told of a heartbeat that failed. Run it with Run,
// end it with Stop.
func New(ids []int64, lease time.Duration, claimed time.Time, extend Extender, warn func(ctx context.Context, err error)) *Keeper {
	k := &Keeper{lease: lease, extend: extend, warn: warn, done: make(chan struct{}), held: map[int64]bool{}, lost: map[int64]bool{}}
	for _, id := range ids {
		k.held[id] = true
	}
	// The claim's UPDATE ran after claimed: the leases end at least this
	// late.
	k.validUntil = claimed.Add(lease - Margin(lease))
	k.wg.Add(1)
	return k
}

// Start marks the job as running; it reports false if its lease is gone.
func (k *Keeper) Start(id int64, cancel context.CancelFunc) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.held[id] || time.Now().After(k.validUntil) {
		return false
	}
	k.running, k.cancel = id, cancel
	return true
}

// Ran marks the job as no longer running; its lease is kept alive until
// Finish.
func (k *Keeper) Ran(id int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running, k.cancel = 0, nil
}

// Finish marks the job as no longer running nor kept alive; it reports
// whether its lease was known to be lost.
func (k *Keeper) Finish(id int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running, k.cancel = 0, nil
	delete(k.held, id)
	return k.lost[id] || time.Now().After(k.validUntil)
}

// Stop ends Run and waits for it.
func (k *Keeper) Stop() {
	close(k.done)
	k.wg.Wait()
}

// Run extends the batch's leases every Lease/3, and cancels the running
// job when its lease is lost or about to end unextended.
func (k *Keeper) Run(ctx context.Context) {
	defer k.wg.Done()
	lease := k.lease
	next := time.Now().Add(lease / 3)
	var passed time.Time // the deadline already acted on
	for {
		k.mu.Lock()
		deadline := k.validUntil
		k.mu.Unlock()
		wake := time.Until(next)
		if !deadline.Equal(passed) {
			wake = min(wake, time.Until(deadline))
		}
		t := time.NewTimer(max(wake, 0))
		select {
		case <-k.done:
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			passed = deadline
			k.mu.Lock()
			if k.cancel != nil {
				k.cancel() // cannot vouch for the lease any more
			}
			k.mu.Unlock()
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(lease / 3)
		k.heartbeat(ctx)
	}
}

// heartbeat pushes the leases of the held jobs to Lease from now, by the
// database clock, and notices jobs whose lease was taken over.
func (k *Keeper) heartbeat(ctx context.Context) {
	k.mu.Lock()
	ids := make([]int64, 0, len(k.held))
	for id := range k.held {
		ids = append(ids, id)
	}
	deadline := k.validUntil
	k.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	lease := k.lease
	sent := time.Now()
	// A heartbeat that hangs must not keep beat from cancelling the running
	// job when the leases can no longer be vouched for.
	until := sent.Add(lease / 3)
	if deadline.After(sent) && deadline.Before(until) {
		until = deadline
	}
	hctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	still, err := k.extend(hctx, ids)
	if err != nil {
		k.warn(ctx, err)
		return
	}
	ok := map[int64]bool{}
	for _, id := range still {
		ok[id] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if !ok[id] && k.held[id] {
			k.lost[id] = true
			delete(k.held, id)
			if k.running == id && k.cancel != nil {
				k.cancel()
			}
		}
	}
	k.validUntil = sent.Add(lease - Margin(lease))
}

// Margin is how long before a lease's end, by the local clock, a
// worker stops vouching for it and cancels the job: room for a pause of
// the process (GC, scheduling) and for clocks that run at slightly
// different rates.
func Margin(lease time.Duration) time.Duration {
	return max(lease/10, 200*time.Millisecond)
}
