// Package batchsize sizes a worker's batches: how many rows (or jobs) its
// next transaction claims.
//
// A batch's rows stay locked (in lease mode: leased and waiting their
// turn) from the claim until the batch ends, while its handlers run one
// after the other: the first row waits for every handler after it. What
// a batch size must bound is that wait, the handlers' work, to a target.
// It must not bound what a batch costs whatever its size: its round
// trips (BEGIN, the claim, the completion, COMMIT) and the commit's
// flush. Those are what a database on another host or on slow storage
// makes slow, and they call for more rows per transaction, not fewer: a
// sizer that counted them would shrink batches exactly when each one
// costs most, and collapse to a row per transaction.
//
// So a Sizer is told each batch's work alone, the time its handlers
// took, and knows nothing of clocks: the worker measures. It starts at
// one row, doubles after a full batch whose work took less than half the
// target, and after a batch whose work took longer than the target sets
// the size that would have met it. A batch that came short (fewer rows
// were ready than it asked for: the workers share what there is) says
// nothing about a larger one, and leaves the size alone.
package batchsize

import "time"

// Sizer is the batch size of one worker.
type Sizer struct {
	size   int
	most   int
	target time.Duration
}

// New returns a Sizer that starts at one row and never goes above most,
// nor, while handlers are slow, keeps their work in a batch longer than
// target.
func New(most int, target time.Duration) *Sizer {
	return &Sizer{size: 1, most: max(most, 1), target: target}
}

// Fixed returns a Sizer that always asks for size rows.
func Fixed(size int) *Sizer { return &Sizer{size: size, most: size} }

// Size returns how many rows the next batch should claim.
func (s *Sizer) Size() int { return s.size }

// Done records a batch that asked for asked rows, got n, and whose
// handlers worked for work in all.
func (s *Sizer) Done(asked, n int, work time.Duration) {
	if s.target <= 0 || n <= 0 {
		return
	}
	switch {
	case work > s.target:
		// The size whose work would have taken the target, at the rate
		// this batch worked: at least one row, at most half as many
		// again as it had, so one slow row does not undo a size.
		fit := int(int64(n) * int64(s.target) / int64(work))
		s.size = max(min(fit, s.size), n/2, 1)
	case n >= asked && n >= s.size && work < s.target/2:
		s.size = min(s.size*2, s.most)
	}
}

// Contended halves the size: the batch left rows out because their keys
// had no free slot, and a smaller batch holds fewer keys' slots, for
// less time, so that more workers find keys free.
func (s *Sizer) Contended() {
	if s.target > 0 {
		s.size = max(s.size/2, 1)
	}
}
