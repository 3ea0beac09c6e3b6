package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProcCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(line string) string {
		p := filepath.Join(dir, "stat")
		require.NoError(t, os.WriteFile(p, []byte(line), 0o600))
		return p
	}
	// A command name with spaces and a parenthesis; utime 250 and stime
	// 50 ticks are fields 14 and 15.
	d, ok := procCPU(write("4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 123 456 789\n"))
	require.True(t, ok)
	require.Equal(t, 3*time.Second, d)

	_, ok = procCPU(write("4242 (short) S 1 2\n"))
	require.False(t, ok, "too few fields")
	_, ok = procCPU(filepath.Join(dir, "missing"))
	require.False(t, ok)
}

func TestCPUPerItem(t *testing.T) {
	a := cpuSample{client: time.Second, server: 2 * time.Second, local: true}
	b := cpuSample{client: 2 * time.Second, server: 5 * time.Second, local: true}
	c, s := cpuPerItem(a, b, 1000)
	require.InDelta(t, 1000, *c, 1e-9, "1 s of client CPU over 1,000 items")
	require.InDelta(t, 3000, *s, 1e-9)

	b.local = false // no server process seen at the end
	c, s = cpuPerItem(a, b, 1000)
	require.NotNil(t, c)
	require.Nil(t, s)

	// A server process that ended in between takes its time out of the
	// total: the others' time still counts, never a negative figure.
	a = cpuSample{server: 9 * time.Second, procs: map[int]time.Duration{1: 2 * time.Second, 2: 7 * time.Second}, local: true}
	b = cpuSample{client: time.Second, server: 4 * time.Second, procs: map[int]time.Duration{1: 3 * time.Second, 3: time.Second}, local: true}
	_, s = cpuPerItem(a, b, 1000)
	require.NotNil(t, s)
	require.InDelta(t, 2000, *s, 1e-9, "1 s more of process 1 and 1 s of the new process 3")

	c, s = cpuPerItem(a, b, 0)
	require.Nil(t, c)
	require.Nil(t, s)
}

// The bench's own process is found, and the server's when the tests use
// the default one, on this machine.
func TestReadCPU(t *testing.T) {
	s := readCPU()
	require.Positive(t, s.client)
	if os.Getenv("BUNQUEUE_MYSQL_DSN") == "" {
		require.True(t, s.local, "no mariadbd, mysqld or postgres process in /proc")
	}
}
