// Package cooldown remembers rows that failed in this process and keeps
// them out of claims for a while, with a wait that doubles on each failure,
// so a poison row is not retried in a hot loop.
package cooldown

import (
	"sync"
	"time"

	"github.com/bunqueue/bunqueue/internal/backoff"
)

// Set holds the rows cooling down. It is safe for concurrent use.
type Set struct {
	base, max time.Duration
	limit     int

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	key      []any
	failures int
	until    time.Time
}

// New returns a Set whose waits start at base and double up to max. At
// most limit rows are kept; past that the one whose wait ends first is
// dropped.
func New(base, max time.Duration, limit int) *Set {
	return &Set{base: base, max: max, limit: limit, entries: map[string]*entry{}}
}

// Add records a failure of the row identified by id (key holds its primary
// key values) and returns how long it stays out of claims.
func (s *Set) Add(id string, key []any, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	if e == nil {
		s.makeRoom(now)
		e = &entry{key: key}
		s.entries[id] = e
	}
	e.failures++
	wait := backoff.Jitter(backoff.Exponential(e.failures, s.base, s.max), 0.1)
	e.until = now.Add(wait)
	return wait
}

// Forget drops the row's failure history (it was processed).
func (s *Set) Forget(id string) {
	s.mu.Lock()
	if len(s.entries) > 0 {
		delete(s.entries, id)
	}
	s.mu.Unlock()
}

// Active returns the primary keys of rows still cooling down at now.
// Failure counts are remembered for max after a wait ends, so a row that
// fails again waits longer.
func (s *Set) Active(now time.Time) [][]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.entries) == 0 {
		return nil
	}
	var keys [][]any
	for id, e := range s.entries {
		switch {
		case now.Before(e.until):
			keys = append(keys, e.key)
		case now.Sub(e.until) > s.max:
			delete(s.entries, id)
		}
	}
	return keys
}

// Len reports how many rows the set remembers.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

func (s *Set) makeRoom(now time.Time) {
	if len(s.entries) < s.limit {
		return
	}
	var oldest string
	var oldestUntil time.Time
	for id, e := range s.entries {
		if !now.Before(e.until) {
			delete(s.entries, id)
			continue
		}
		if oldest == "" || e.until.Before(oldestUntil) {
			oldest, oldestUntil = id, e.until
		}
	}
	if len(s.entries) >= s.limit && oldest != "" {
		delete(s.entries, oldest)
	}
}
