package bunqueue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func keys(ids ...string) []candidate {
	out := make([]candidate, len(ids))
	for i, id := range ids {
		out[i] = candidate{id: id, vals: []any{id}}
	}
	return out
}

func ids(cs []candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out
}

func TestFeedHandsOutEachRowOnce(t *testing.T) {
	f := newFeed(&runner{workers: 2, batch: 2})
	require.Equal(t, 8, f.begin(), "window: two rounds of batches")
	require.Equal(t, 3, f.add(keys("a", "b", "c")))

	got, _ := f.take(2)
	require.Equal(t, []string{"a", "b"}, ids(got), "a fair share: ceil(3 ready / 2 workers)")
	got, _ = f.take(2)
	require.Equal(t, []string{"c"}, ids(got))
	got, filled := f.take(2)
	require.Nil(t, got)
	require.NotNil(t, filled)

	// A read that finds busy rows again skips them, and asks past them.
	require.Equal(t, 3+8, f.begin())
	require.Equal(t, 1, f.add(keys("a", "b", "c", "d")))
	select {
	case <-filled:
	default:
		t.Fatal("adding rows wakes the workers that found none")
	}

	// A row that finished before a read began is handed out again if the
	// read finds it (it came back to the queue).
	f.finish(keys("a"))
	f.begin()
	require.Equal(t, 1, f.add(keys("a")))

	// One that finished while the read ran may have been seen before its
	// commit: it is not.
	f.begin()
	f.finish(keys("b"))
	require.Zero(t, f.add(keys("b")))
	f.begin()
	require.Equal(t, 1, f.add(keys("b")), "the next read is trusted")
}
