package limit

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A key value is its own slot key where it fits the column as UTF-8 text,
// and its SHA-256 otherwise.
func TestSlotKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		val    string
		prefix string
	}{
		{"example.com", "k:example.com"},
		{"", "k:"},
		{strings.Repeat("a", 200), "k:" + strings.Repeat("a", 200)},
		{strings.Repeat("a", 201), "h:"},
		{"\xff", "h:"},
		{"a\x00b", "h:"},
	} {
		got := SlotKey(tc.val)
		require.True(t, strings.HasPrefix(got, tc.prefix), "%q: %q", tc.val, got)
		require.LessOrEqual(t, len(got), 202, "%q", tc.val)
	}
}

// A NULL key column (a nil pointer) is not limited; a value is, by its
// text.
func TestFieldKey(t *testing.T) {
	t.Parallel()
	var none *int64
	key, val, limited := FieldKey(reflect.ValueOf(none))
	require.False(t, limited)
	require.Equal(t, "", key)
	require.Nil(t, val)
	n := int64(7)
	key, val, limited = FieldKey(reflect.ValueOf(&n))
	require.True(t, limited)
	require.Equal(t, "k:7", key)
	require.Equal(t, int64(7), val)
}

// A batch starts no more items than it has tokens left, each under one
// of them, at once while they were taken less than half their grace ago;
// a nil *Tokens is no limit.
func TestTokensStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var none *Tokens
	require.Equal(t, 10, none.Left(10))
	ok, err := none.Start(ctx, nil)
	require.True(t, ok)
	require.NoError(t, err)
	tk := &Tokens{r: &Rate{per: time.Minute}, slots: []RateSlot{{Slot: 0}, {Slot: 1}, {Slot: 2}}, took: time.Now()}
	require.Equal(t, 3, tk.Left(10))
	require.Equal(t, 2, tk.Left(2))
	for range 2 {
		ok, err := tk.Start(ctx, nil) // within the grace: no statement
		require.True(t, ok)
		require.NoError(t, err)
	}
	require.Equal(t, 1, tk.Left(10))
	_, _ = tk.Start(ctx, nil)
	require.Equal(t, 0, tk.Left(10))
	ok, err = tk.Start(ctx, nil)
	require.False(t, ok, "no slot left")
	require.NoError(t, err)
}

// The grace is half of Per, at least minGrace; a settled hold keeps half
// the grace past Per, at most 1 ms.
func TestGrace(t *testing.T) {
	t.Parallel()
	require.Equal(t, 500*time.Millisecond, Grace(time.Second))
	require.Equal(t, minGrace, Grace(time.Millisecond))
	require.Equal(t, time.Millisecond, margin(time.Second))
	require.Equal(t, minGrace/2, margin(time.Millisecond))
}

// A worker waits for a RateLimit's next free slot, about slotWait for a
// GlobalLimit, and never longer than the poll interval.
func TestWait(t *testing.T) {
	t.Parallel()
	rw := fmt.Errorf("batch: %w", &RateWait{Queue: "q", Wait: 300 * time.Millisecond})
	require.ErrorIs(t, rw, ErrLimited)
	wait := Wait(rw, time.Second)
	require.True(t, wait >= 300*time.Millisecond && wait <= 302*time.Millisecond, "%s", wait)
	require.Equal(t, 100*time.Millisecond, Wait(rw, 100*time.Millisecond))
	wait = Wait(ErrLimited, time.Second)
	require.True(t, wait >= slotWait/2 && wait <= slotWait*3/2, "%s", wait)
	require.Equal(t, 10*time.Millisecond, Wait(ErrLimited, 10*time.Millisecond))
}

// A slot taken ahead of the end of its last hold serves no start before
// that end: Start waits for it (and gives up if ctx ends first), and the
// start is still covered without a statement, the hold having been taken
// that much longer. Not used, the slot is given back at that end, not
// before; a slot that served a start stays held Per and the margin from
// it.
func TestCoverTakenAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &Rate{per: time.Minute} // a grace of 30 s: no extension however late the timer fires
	now := time.Now()
	s := RateSlot{Slot: 3, Wait: 20 * time.Millisecond, Ready: now.Add(20 * time.Millisecond)}
	c := r.Cover(s, "h", now, Ahead([]RateSlot{{Slot: 1}, s}))
	ok, err := c.Start(ctx, nil) // no db: a statement would panic
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, c.Started().Before(s.Ready), "started %s before its slot's last hold ended", s.Ready.Sub(c.Started()))
	d, held := c.rest(c.Started())
	require.True(t, held)
	require.Equal(t, r.per+margin(r.per), d)

	unused := r.Cover(RateSlot{Slot: 4, Wait: time.Second, Ready: time.Now().Add(time.Second)}, "h", time.Now(), time.Second)
	d, held = unused.rest(time.Now())
	require.True(t, held, "given back before its last hold ended")
	require.Greater(t, d, 900*time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ok, err = unused.Start(cctx, nil)
	require.NoError(t, err)
	require.False(t, ok, "started before its last hold ended")

	free := r.Cover(RateSlot{Slot: 5}, "h", time.Now(), 0)
	_, held = free.rest(time.Now())
	require.False(t, held, "a free slot not used is given back at once")
}
