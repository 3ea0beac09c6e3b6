package claimconn

import (
	"sync"
	"time"
)

// stmtFloorEvery is how many statements the floor is the fastest of,
// give or take: enough to hold through a spell of waits, few enough to
// follow a database that moved further away.
const stmtFloorEvery = 256

// StmtTimes times the statements of one session: how many ran in the
// current handler call (see Start and Work) and how long they took, and
// the fastest of the last stmtFloorEvery or so.
//
// A handler's statements are part of its work, which sizes its batches
// (internal/batchsize): a round trip each, at least. But a statement
// that waits on a busy server (commits queued for the disk, a flush of
// the log) takes longer whatever the batch, and more so with smaller
// batches, whose commits come more often: timed as they ran, such waits
// shrink the batches that cause them, down to a row or two per
// transaction. So a handler's work counts each of its statements as the
// fastest statement the session ran lately (its floor: a round trip and
// the least the server does), and the rest of its time as it ran.
type StmtTimes struct {
	mu       sync.Mutex
	counting bool
	n        int
	took     time.Duration
	fastest  time.Duration // of this stretch of statements; 0 before the first
	previous time.Duration // of the stretch before
	seen     int           // statements in this stretch
}

// add times one statement.
func (s *StmtTimes) add(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counting {
		s.n++
		s.took += d
	}
	if s.seen == 0 || d < s.fastest {
		s.fastest = d
	}
	if s.seen++; s.seen >= stmtFloorEvery {
		s.previous, s.seen = s.fastest, 0
	}
}

// also counts one more statement in the current handler call, whose time
// the next one's includes (its savepoint).
func (s *StmtTimes) also() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counting {
		s.n++
	}
}

// Start begins counting a handler call's statements.
func (s *StmtTimes) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counting, s.n, s.took = true, 0, 0
}

// Work returns the work of a handler call that took took, its
// statements counted at the floor, and ends the count.
func (s *StmtTimes) Work(took time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counting = false
	floor := s.fastest
	if s.previous > 0 && (s.seen == 0 || s.previous < floor) {
		floor = s.previous
	}
	return max(took-s.took, 0) + time.Duration(s.n)*min(floor, s.took/time.Duration(max(s.n, 1)))
}
