package claimconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A handler call's work counts each of its statements at the floor, the
// fastest statement of the session lately, and the rest of its time as
// it ran: a statement that waited on a busy server does not make the
// handler look slow.
func TestStatementTimesFloor(t *testing.T) {
	const ms = time.Millisecond
	var s StmtTimes
	for range 10 {
		s.add(2 * ms) // BEGIN, claims, commits: about a round trip each
	}
	s.Start()
	s.add(30 * ms) // the handler's UPDATE, queued behind commits
	require.Equal(t, 1*ms+2*ms, s.Work(31*ms), "its 1 ms of its own, and the UPDATE at the floor")

	s.Start()
	s.also() // a savepoint, timed with the statement after it
	s.add(5 * ms)
	require.Equal(t, 4*ms, s.Work(5*ms), "two statements, both at the floor; no time of its own")

	s.Start()
	require.Equal(t, 7*ms, s.Work(7*ms), "no statement: all its time is its own")

	s.Start()
	s.add(1 * ms)
	require.Equal(t, 1*ms, s.Work(1*ms), "a statement faster than the floor counts as it ran, and lowers the floor")
	s.Start()
	s.add(9 * ms)
	require.Equal(t, 1*ms, s.Work(9*ms))

	// The floor follows a database that moved further away: the fastest
	// of the stretch before and this one.
	for range 2 * stmtFloorEvery {
		s.add(4 * ms)
	}
	s.Start()
	s.add(10 * ms)
	require.Equal(t, 4*ms, s.Work(10*ms))
}
