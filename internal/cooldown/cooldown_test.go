package cooldown

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCooldownDoublesAndExpires(t *testing.T) {
	t.Parallel()
	s := New(time.Second, 8*time.Second, 10)
	now := time.Unix(1000, 0)

	w1 := s.Add("1", []any{int64(1)}, now)
	require.InDelta(t, float64(time.Second), float64(w1), float64(110*time.Millisecond))
	require.Equal(t, [][]any{{int64(1)}}, s.Active(now))

	now = now.Add(w1)
	require.Empty(t, s.Active(now), "wait over")
	w2 := s.Add("1", []any{int64(1)}, now)
	require.InDelta(t, float64(2*time.Second), float64(w2), float64(210*time.Millisecond), "second failure waits twice as long")

	for range 10 {
		now = now.Add(time.Minute)
		_ = s.Active(now)
	}
	require.Zero(t, s.Len(), "history is forgotten after max past the wait")

	s.Add("2", []any{int64(2)}, now)
	s.Forget("2")
	require.Empty(t, s.Active(now))
}

func TestCooldownLimit(t *testing.T) {
	t.Parallel()
	s := New(time.Second, time.Minute, 3)
	now := time.Unix(1000, 0)
	for i, id := range []string{"a", "b", "c", "d"} {
		s.Add(id, []any{id}, now.Add(time.Duration(i)*time.Millisecond))
	}
	require.Equal(t, 3, s.Len())
	require.Len(t, s.Active(now), 3)
}
