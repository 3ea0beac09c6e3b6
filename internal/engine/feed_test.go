package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func keys(ids ...string) []Key {
	out := make([]Key, len(ids))
	for i, id := range ids {
		out[i] = Key{ID: id, Vals: []any{id}}
	}
	return out
}

func ids(cs []Key) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestFeedHandsOutEachRowOnce(t *testing.T) {
	f := NewFeed(&Queue{Settings: Settings{Workers: 2, Batch: 2}})
	require.Equal(t, 32, f.begin(), "window: minReadAhead per worker, more than two rounds of batches")
	require.Equal(t, 2*10*50, NewFeed(&Queue{Settings: Settings{Workers: 10, Batch: 50}}).window, "window: two rounds of large batches")
	require.Equal(t, 3, f.add(keys("a", "b", "c")))

	wake := make(chan struct{}, 1)
	got := f.take(2, wake)
	require.Equal(t, []string{"a", "b"}, ids(got), "a fair share: ceil(3 ready / 2 workers)")
	got = f.take(2, wake)
	require.Equal(t, []string{"c"}, ids(got))
	got = f.take(2, wake)
	require.Nil(t, got)
	require.Len(t, f.waiters, 1, "the worker waits")

	// A read that finds busy rows again skips them, and asks past them.
	require.Equal(t, 48, f.begin(), "3 busy and 32 new, rounded up to 16: the read's text recurs")
	require.Equal(t, 1, f.add(keys("a", "b", "c", "d")))
	select {
	case <-wake:
	default:
		t.Fatal("adding rows wakes the workers that found none")
	}
	require.Empty(t, f.waiters)

	// A row that finished before a read began is handed out again if the
	// read finds it (it came back to the queue).
	f.finish(keys("a"), Result{Got: []string{"a"}})
	f.begin()
	require.Equal(t, 1, f.add(keys("a")))

	// One that finished while the read ran may have been seen before its
	// commit: it is not.
	f.begin()
	f.finish(keys("b"), Result{Got: []string{"b"}})
	require.Zero(t, f.add(keys("b")))
	f.begin()
	require.Equal(t, 1, f.add(keys("b")), "the next read is trusted")

	// A row the claim did not get (another transaction held it) is not
	// handed out again for heldFor, nor before a wake-up releases it; a
	// read asks past it meanwhile.
	f.finish(keys("c", "d"), Result{Got: []string{"d"}})
	busy := len(f.busy)
	require.Equal(t, (busy+1+f.window+15)/16*16, f.begin())
	require.Equal(t, 1, f.add(keys("c", "d")), "c is held, d is not")
	f.release()
	f.begin()
	require.Equal(t, 1, f.add(keys("c")), "a wake-up released it")
	f.finish(keys("c"), Result{})
	f.begin()
	require.Zero(t, f.add(keys("c")))
	time.Sleep(heldFor)
	f.begin()
	require.Equal(t, 1, f.add(keys("c")), "held no longer")

	// After a failed batch nothing is held: the keys' fate is unknown.
	f.finish(keys("c"), Result{Err: errors.New("deadlock")})
	f.begin()
	require.Equal(t, 1, f.add(keys("c")))
}

// keyed returns rows id=key pairs: "1:a" is row 1 of KeyLimit key "a",
// "5" a row without a key.
func keyed(rows ...string) []Key {
	out := make([]Key, len(rows))
	for i, r := range rows {
		id, key, _ := strings.Cut(r, ":")
		out[i] = Key{ID: id, Vals: []any{id}, LimitKey: key}
	}
	return out
}

// A queue with a KeyLimit of one: a batch takes no row of a key that
// another batch of this process holds, takes its keys' rows together
// (within the fair share of rows), at most its share of the free keys,
// and gives them back when done; the rows it leaves keep their order, and
// the workers waiting for rows are woken when a key comes free.
func TestFeedKeepsBatchesOfAKeyApart(t *testing.T) {
	f := NewFeed(&Queue{Settings: Settings{Workers: 2, Batch: 10}, PerKey: 1})
	f.begin()
	require.Equal(t, 8, f.add(keyed("1:a", "2:b", "3:a", "4:c", "5", "6:b", "7:d", "8:a")))

	// Eight rows for two workers: four a batch. Four free keys: two a batch.
	first := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"1", "2", "3", "5"}, ids(first), "keys a and b, and the row without a key")
	second := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"4"}, ids(second), "c: one of the two keys left free, its share")
	third := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"7"}, ids(third), "d: b and a are held")
	f.begin()
	require.Equal(t, 3, f.add(keyed("9:a", "10:c", "11:e")))
	fourth := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"11"}, ids(fourth), "e: a, b and c are held")
	filled := make(chan struct{}, 1)
	none := f.take(10, filled)
	require.Nil(t, none, "only rows of held keys are left")
	require.Equal(t, []string{"6", "8", "9", "10"}, ids(f.ready), "in their order")

	f.finish(first, Result{Got: ids(first)})
	f.done(first)
	select {
	case <-filled:
	default:
		t.Fatal("a key that comes free wakes the workers waiting for rows")
	}
	got := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"6"}, ids(got), "b is free again, and a; one key for this batch")
	got2 := f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"8", "9"}, ids(got2), "a's rows together; c is still held")
	for _, b := range [][]Key{second, third, fourth, got, got2} {
		f.done(b)
	}
	require.Empty(t, f.keyBusy, "every key given back")
	got = f.take(10, make(chan struct{}, 1))
	require.Equal(t, []string{"10"}, ids(got))
}

// With a KeyLimit of two, two batches of this process may hold a key.
func TestFeedKeyLimitOfTwo(t *testing.T) {
	f := NewFeed(&Queue{Settings: Settings{Workers: 3, Batch: 10}, PerKey: 2})
	f.begin()
	f.add(keyed("1:a", "2:a", "3:a"))
	one := f.take(1, make(chan struct{}, 1))
	two := f.take(1, make(chan struct{}, 1))
	three := f.take(1, make(chan struct{}, 1))
	require.Equal(t, []string{"1"}, ids(one))
	require.Equal(t, []string{"2"}, ids(two))
	require.Nil(t, three, "a third batch of key a waits")
}

// Rows that come wake as many waiting workers as there are rows, those
// that waited longest first, not every worker for one row.
func TestFeedWakesOneWorkerARow(t *testing.T) {
	f := NewFeed(&Queue{Settings: Settings{Workers: 3, Batch: 1}})
	chans := []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)}
	for _, ch := range chans {
		require.Nil(t, f.take(1, ch))
		require.Nil(t, f.take(1, ch), "a worker waits once, however often it looks")
	}
	require.Len(t, f.waiters, 3)
	woken := func() []int {
		var out []int
		for i, ch := range chans {
			select {
			case <-ch:
				out = append(out, i)
			default:
			}
		}
		return out
	}
	f.begin()
	require.Equal(t, 1, f.add(keys("a")))
	require.Equal(t, []int{0}, woken(), "one row, one worker: the first that waited")
	f.begin()
	require.Equal(t, 2, f.add(keys("b", "c")))
	require.Equal(t, []int{1, 2}, woken())
	require.Empty(t, f.waiters)
}
