package periodic

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func us(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMicro()
}

func TestCronInLocation(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	s, err := Cron("0 9 * * *", paris)
	require.NoError(t, err)
	require.Equal(t, us("2026-07-01T07:00:00Z"), s.Next(us("2026-06-30T08:00:00Z")), "09:00 in Paris, summer time")
	require.Equal(t, us("2026-12-01T08:00:00Z"), s.Next(us("2026-11-30T09:00:00Z")), "09:00 in Paris, winter time")
	utc, err := Cron("0 9 * * *", nil)
	require.NoError(t, err)
	require.Equal(t, us("2026-07-01T09:00:00Z"), utc.Next(us("2026-06-30T10:00:00Z")), "UTC by default")
	secs, err := Cron("*/5 * * * * *", nil)
	require.NoError(t, err)
	require.Equal(t, us("2026-01-01T00:00:05Z"), secs.Next(us("2026-01-01T00:00:00.5Z")), "a sixth field, first, for seconds")
	require.Equal(t, us("2026-01-01T00:00:10Z"), secs.From(us("2026-01-01T00:00:00Z"), us("2026-01-01T00:00:07.2Z")))
	require.Equal(t, us("2026-01-01T00:00:10Z"), secs.From(us("2026-01-01T00:00:00Z"), us("2026-01-01T00:00:10Z")), "a tick at the cutoff is kept")
}

func TestCronRefused(t *testing.T) {
	for _, expr := range []string{"", "  ", "61 * * * *", "* * *", "CRON_TZ=UTC * * * * *", "TZ=", "@every 1m", "@sometimes", "0 0 30 2 *"} {
		_, err := Cron(expr, nil)
		require.Error(t, err, "%q", expr)
	}
}

func TestEvery(t *testing.T) {
	s := Every(time.Second)
	require.Equal(t, int64(2_500_000), s.Next(1_500_000))
	require.Equal(t, int64(11_500_000), s.From(1_500_000, 10_600_000), "on the chain through t")
	require.Equal(t, int64(10_500_000), s.From(1_500_000, 10_500_000))
	require.Equal(t, int64(Never), s.Next(Never-1))
	require.Equal(t, "every 1s", s.String())
}

func TestDue(t *testing.T) {
	s := Every(time.Second)
	none := int64(NoTick)
	t.Run("on time", func(t *testing.T) {
		ticks, next := Due(s, Record{Next: 10e6, Last: none}, 10_200_000, time.Minute, false, 1000)
		require.Equal(t, []int64{10e6}, ticks)
		require.Equal(t, int64(11e6), next)
	})
	t.Run("not yet", func(t *testing.T) {
		ticks, next := Due(s, Record{Next: 10e6, Last: none}, 9e6, time.Minute, false, 1000)
		require.Empty(t, ticks)
		require.Equal(t, int64(10e6), next)
	})
	t.Run("caught up within the window, the older skipped", func(t *testing.T) {
		ticks, next := Due(s, Record{Next: 10e6, Last: none}, 20_500_000, 3*time.Second, false, 1000)
		require.Equal(t, []int64{18e6, 19e6, 20e6}, ticks)
		require.Equal(t, int64(21e6), next)
	})
	t.Run("at most most", func(t *testing.T) {
		ticks, next := Due(s, Record{Next: 10e6, Last: none}, 20_500_000, time.Minute, false, 4)
		require.Equal(t, []int64{10e6, 11e6, 12e6, 13e6}, ticks)
		require.Equal(t, int64(14e6), next)
	})
	t.Run("all skipped", func(t *testing.T) {
		h := Every(time.Hour)
		ticks, next := Due(h, Record{Next: 0, Last: none}, 5_400_000_000, time.Minute, false, 1000)
		require.Empty(t, ticks)
		require.Equal(t, int64(7_200_000_000), next)
		ticks, next = Due(h, Record{Next: 0, Last: none}, 5_400_000_000, time.Minute, true, 1000)
		require.Equal(t, []int64{5_400_000_000}, ticks, "run in their place, now")
		require.Equal(t, int64(7_200_000_000), next)
	})
	t.Run("never twice a time", func(t *testing.T) {
		ticks, _ := Due(s, Record{Next: 10e6, Last: 11e6}, 12_500_000, time.Minute, false, 1000)
		require.Equal(t, []int64{12e6}, ticks)
	})
}
