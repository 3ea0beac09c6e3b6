package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseDelays checks --delay: durations, commas and spaces, µs or
// us; an empty item, a word or a negative delay refused.
func TestParseDelays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []time.Duration
		err  string
	}{
		{in: "", want: nil},
		{in: "0,250us,1ms", want: []time.Duration{0, 250 * time.Microsecond, time.Millisecond}},
		{in: " 1ms , 250µs", want: []time.Duration{time.Millisecond, 250 * time.Microsecond}},
		{in: "1ms,", err: "--delay"},
		{in: "fast", err: "--delay"},
		{in: "-1ms", err: "negative"},
	} {
		got, err := parseDelays(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}
