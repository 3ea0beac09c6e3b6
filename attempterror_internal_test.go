package bunqueue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// AttemptErrors write the JSON they read, times to the microsecond in
// UTC; none is NULL, and NULL reads as none.
func TestAttemptErrorsRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 6, 30, 0, 123456000, time.UTC)
	in := AttemptErrors{{Attempt: 1, At: at, Error: "boom \"é\"\n"}, {Attempt: 2, At: at.Add(time.Second), Error: ""}}
	v, err := in.Value()
	require.NoError(t, err)
	require.Equal(t, `[{"attempt":1,"at_us":1796279400123456,"error":"boom \"é\"\n"},{"attempt":2,"at_us":1796279401123456,"error":""}]`, v)
	var out AttemptErrors
	require.NoError(t, out.Scan([]byte(v.(string))))
	require.Equal(t, in, out)
	require.NoError(t, out.Scan(nil))
	require.Nil(t, out)
	v, err = AttemptErrors(nil).Value()
	require.NoError(t, err)
	require.Nil(t, v)
	require.ErrorContains(t, out.Scan(42), "cannot read int")
	require.ErrorContains(t, out.Scan("{"), "bunqueue: attempt errors")
}
