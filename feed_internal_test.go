package bunqueue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func keys(ids ...string) []feedKey {
	out := make([]feedKey, len(ids))
	for i, id := range ids {
		out[i] = feedKey{id: id, vals: []any{id}}
	}
	return out
}

func ids(cs []feedKey) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out
}

func TestFeedHandsOutEachRowOnce(t *testing.T) {
	f := newFeed(&runner{runSettings: runSettings{workers: 2, batch: 2}})
	require.Equal(t, 32, f.begin(), "window: minReadAhead per worker, more than two rounds of batches")
	require.Equal(t, 2*10*50, newFeed(&runner{runSettings: runSettings{workers: 10, batch: 50}}).window, "window: two rounds of large batches")
	require.Equal(t, 3, f.add(keys("a", "b", "c")))

	got, _ := f.take(2)
	require.Equal(t, []string{"a", "b"}, ids(got), "a fair share: ceil(3 ready / 2 workers)")
	got, _ = f.take(2)
	require.Equal(t, []string{"c"}, ids(got))
	got, filled := f.take(2)
	require.Nil(t, got)
	require.NotNil(t, filled)

	// A read that finds busy rows again skips them, and asks past them.
	require.Equal(t, 3+32, f.begin())
	require.Equal(t, 1, f.add(keys("a", "b", "c", "d")))
	select {
	case <-filled:
	default:
		t.Fatal("adding rows wakes the workers that found none")
	}

	// A row that finished before a read began is handed out again if the
	// read finds it (it came back to the queue).
	f.finish(keys("a"), batchResult{got: []string{"a"}})
	f.begin()
	require.Equal(t, 1, f.add(keys("a")))

	// One that finished while the read ran may have been seen before its
	// commit: it is not.
	f.begin()
	f.finish(keys("b"), batchResult{got: []string{"b"}})
	require.Zero(t, f.add(keys("b")))
	f.begin()
	require.Equal(t, 1, f.add(keys("b")), "the next read is trusted")

	// A row the claim did not get (another transaction held it) is not
	// handed out again for heldFor, nor before a wake-up releases it; a
	// read asks past it meanwhile.
	f.finish(keys("c", "d"), batchResult{got: []string{"d"}})
	busy := len(f.busy)
	require.Equal(t, busy+1+f.window, f.begin())
	require.Equal(t, 1, f.add(keys("c", "d")), "c is held, d is not")
	f.release()
	f.begin()
	require.Equal(t, 1, f.add(keys("c")), "a wake-up released it")
	f.finish(keys("c"), batchResult{})
	f.begin()
	require.Zero(t, f.add(keys("c")))
	time.Sleep(heldFor)
	f.begin()
	require.Equal(t, 1, f.add(keys("c")), "held no longer")

	// After a failed batch nothing is held: the keys' fate is unknown.
	f.finish(keys("c"), batchResult{err: errors.New("deadlock")})
	f.begin()
	require.Equal(t, 1, f.add(keys("c")))
}
