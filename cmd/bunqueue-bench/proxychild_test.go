package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerAddr checks that the DSNs of both servers are read and
// rewritten to connect to the forwarder, their other settings kept, and
// that those the forwarder cannot stand for are refused.
func TestServerAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn, addr, proxied string
		err                string
	}{
		{dsn: "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC", addr: "127.0.0.1:3306",
			proxied: "root@tcp(127.0.0.1:4000)/test?parseTime=true"}, // loc=UTC is the driver's default
		{dsn: "u:p@tcp(db.example:3307)/x?parseTime=true", addr: "db.example:3307",
			proxied: "u:p@tcp(127.0.0.1:4000)/x?parseTime=true"},
		{dsn: "root@unix(/run/mysqld/mysqld.sock)/test?parseTime=true", err: "not tcp"},
		{dsn: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", addr: "127.0.0.1:5432",
			proxied: "postgres://postgres@127.0.0.1:4000/test?sslmode=disable"},
		{dsn: "postgresql://u:secret@db.example/test", addr: "db.example:5432",
			proxied: "postgresql://u:secret@127.0.0.1:4000/test"},
		{dsn: "postgres:///test?host=/run/postgresql", err: "parameter"},
		{dsn: "postgres://u@h1:5432,h2:5432/test", err: "several"},
	} {
		s := benchSQLFor(tc.dsn)
		addr, err := s.serverAddr(tc.dsn)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.dsn)
			continue
		}
		require.NoError(t, err, tc.dsn)
		require.Equal(t, tc.addr, addr, tc.dsn)
		proxied, err := s.withAddr(tc.dsn, "127.0.0.1:4000")
		require.NoError(t, err, tc.dsn)
		require.Equal(t, tc.proxied, proxied, tc.dsn)
	}
}

// TestProxyControl checks the forwarder process's protocol: its address
// first, then its counts for each "stats", until its input ends.
func TestProxyControl(t *testing.T) {
	t.Parallel()
	f := startForwarder(t, testServer(t, echo), 0)
	var out strings.Builder
	require.NoError(t, serveProxyControl(f, strings.NewReader("stats\nstats\n"), &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	require.JSONEq(t, `{"addr": "`+f.addr()+`"}`, lines[0])
	require.Contains(t, lines[1], `"round_trips":0,"conns":0,"cpu_us":`)

	require.ErrorContains(t, serveProxyControl(f, strings.NewReader("quit\n"), &strings.Builder{}), `unknown command "quit"`)
}
