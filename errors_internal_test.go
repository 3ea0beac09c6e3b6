package bunqueue

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// errorf says "bunqueue: " once, whatever the errors it wraps or shows
// say, and keeps the wrapped ones in the chain.
func TestErrorf(t *testing.T) {
	t.Parallel()
	ie := &ItemError{Queue: "q", Key: "id=1", Err: errors.New("boom")}
	plain := errors.New("bunqueue: shown, not wrapped")
	err := errorf("bunqueue: job %d: %w: then %w, and %v", 7, ErrJobNotFound, ie, plain)
	require.Equal(t, `bunqueue: job 7: no job with that id: then queue "q": row id=1: boom, and shown, not wrapped`, err.Error())
	require.ErrorIs(t, err, ErrJobNotFound)
	var got *ItemError
	require.ErrorAs(t, err, &got)
	require.Same(t, ie, got)
	require.NotErrorIs(t, err, plain, "%v shows an error, it does not wrap it")

	one := errorf("bunqueue: get job %d: %w", 7, ErrJobNotFound)
	require.Equal(t, "bunqueue: get job 7: no job with that id", one.Error())
	require.ErrorIs(t, one, ErrJobNotFound)
	require.Equal(t, "bunqueue: job cancelled: no job with that id", Cancel(ErrJobNotFound).Error())
	require.Equal(t, "bunqueue: handler panicked: no job with that id", (&PanicError{Value: ErrJobNotFound}).Error())
	require.Equal(t, "bunqueue: handler panicked: kaboom", (&PanicError{Value: "kaboom"}).Error())
}
