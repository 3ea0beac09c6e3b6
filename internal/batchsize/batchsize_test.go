package batchsize

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const target = 50 * time.Millisecond

// sim is a worker burning down a backlog on a fake clock: each batch
// costs its fixed part (round trips and the commit's flush, whatever its
// size) plus its handlers' work, and the sizer is told the work alone,
// as the engine tells it.
type sim struct {
	fixed   time.Duration // per batch: BEGIN, claim, completion, COMMIT
	perRow  time.Duration // each handler's work
	ready   int           // rows a batch can get at most (the worker's share), 0: unlimited
	clock   time.Duration // the fake clock
	batches int
	rows    int
	sizes   []int
}

// run burns down n rows with s and returns the rows per transaction.
func (m *sim) run(s *Sizer, n int) float64 {
	for m.rows < n {
		asked := s.Size()
		got := min(asked, n-m.rows)
		if m.ready > 0 {
			got = min(got, m.ready)
		}
		work := time.Duration(got) * m.perRow
		m.clock += m.fixed + work
		m.batches++
		m.rows += got
		m.sizes = append(m.sizes, got)
		s.Done(asked, got, work)
	}
	return float64(m.rows) / float64(m.batches)
}

// Slow round trips and slow commits do not shrink batches: at 1 ms each
// way and 3 ms commits (a batch's fixed part: four round trips and the
// flush, 11 ms), as with none, fast handlers reach the largest size and
// stay there, and the burn-down costs one transaction per most rows.
func TestSlowCommitsDoNotShrinkBatches(t *testing.T) {
	for _, fixed := range []time.Duration{0, 500 * time.Microsecond, 11 * time.Millisecond, 200 * time.Millisecond} {
		m := &sim{fixed: fixed, perRow: 20 * time.Microsecond}
		s := New(50, target)
		perTx := m.run(s, 20000)
		require.Equal(t, 50, s.Size(), "fixed %s: the size reached the most", fixed)
		require.Greater(t, perTx, 49.0, "fixed %s: rows per transaction", fixed)
		for i := 1; i < len(m.sizes)-1; i++ { // the last batch takes what is left
			require.GreaterOrEqual(t, m.sizes[i], m.sizes[i-1], "fixed %s: a size went down at batch %d", fixed, i)
		}
	}
}

// Slow handlers keep their batches' work near the target: 10 ms a row
// settles at 3 to 5 rows (25 to 50 ms of work), whatever the fixed part;
// handlers slower than the target run one row per transaction.
func TestSlowHandlersBoundTheWork(t *testing.T) {
	for _, fixed := range []time.Duration{0, 11 * time.Millisecond} {
		m := &sim{fixed: fixed, perRow: 10 * time.Millisecond}
		m.run(New(50, target), 2000)
		for _, n := range m.sizes[len(m.sizes)/2 : len(m.sizes)-1] {
			require.GreaterOrEqual(t, n, 3, "fixed %s", fixed)
			require.LessOrEqual(t, time.Duration(n)*m.perRow, target, "fixed %s: a batch's work went over the target", fixed)
		}
		slow := &sim{fixed: fixed, perRow: 80 * time.Millisecond}
		slow.run(New(50, target), 100)
		for _, n := range slow.sizes {
			require.Equal(t, 1, n, "fixed %s: one slow row per transaction", fixed)
		}
	}
}

// Handlers that turn slow shrink a large size to fit within a few
// batches, by at most half a batch at a time: one slow row does not
// undo a size.
func TestHandlersThatTurnSlow(t *testing.T) {
	s := New(50, target)
	(&sim{perRow: 10 * time.Microsecond}).run(s, 5000)
	require.Equal(t, 50, s.Size())
	s.Done(50, 50, 49*10*time.Microsecond+200*time.Millisecond) // one row of 200 ms
	require.Equal(t, 25, s.Size(), "halved, not cut to one")
	m := &sim{perRow: 5 * time.Millisecond}
	m.run(s, 500)
	require.LessOrEqual(t, time.Duration(s.Size())*m.perRow, target)
	require.GreaterOrEqual(t, s.Size(), 5)
}

// When rows are scarce a worker gets its share of what is ready, fewer
// than it asked for: that batch says nothing of a larger one, and the
// size does not grow past what the rows allow.
func TestScarceRowsDoNotGrowTheSize(t *testing.T) {
	m := &sim{perRow: 10 * time.Microsecond, ready: 3}
	s := New(50, target)
	m.run(s, 300)
	require.LessOrEqual(t, s.Size(), 4, "grew only while its batches came full")
	for _, n := range m.sizes {
		require.LessOrEqual(t, n, 3)
	}
}

// A fixed size never changes; Contended halves a self-sized one.
func TestFixedAndContended(t *testing.T) {
	f := Fixed(7)
	f.Done(7, 7, time.Hour)
	f.Done(7, 7, 0)
	f.Contended()
	require.Equal(t, 7, f.Size())

	s := New(50, target)
	(&sim{perRow: time.Microsecond}).run(s, 1000)
	require.Equal(t, 50, s.Size())
	s.Contended()
	require.Equal(t, 25, s.Size())
	s.Done(25, 0, time.Hour) // an empty batch says nothing
	require.Equal(t, 25, s.Size())
}
