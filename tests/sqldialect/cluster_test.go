package sqldialect_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// On a lone MariaDB or MySQL server: no cluster, one server, read through
// ClusterConns connections held at once.
func TestClusterOfOneServer(t *testing.T) {
	t.Parallel()
	db := dbtest.OpenMySQL(t, 0)
	c, err := sqldialect.ClusterOf(t.Context(), sqldialect.MySQL{}, db)
	require.NoError(t, err)
	require.Empty(t, c.Kind, "not a cluster")
	require.Zero(t, c.Size)
	require.Len(t, c.Nodes, 1, "every connection reaches the same server")
	require.Regexp(t, `^.+:\d+$`, c.Nodes[0], "named by host and port")
	require.GreaterOrEqual(t, db.Stats().OpenConnections, sqldialect.ClusterConns, "the connections are held at once")
}

// A pool of one connection is read through that one; a pool whose other
// connections are busy is read through those it can get, after a short
// wait, not stuck.
func TestClusterOfSmallOrBusyPool(t *testing.T) {
	t.Parallel()
	one := dbtest.OpenMySQL(t, 1)
	c, err := sqldialect.ClusterOf(t.Context(), sqldialect.MySQL{}, one)
	require.NoError(t, err)
	require.Len(t, c.Nodes, 1)

	busy := dbtest.OpenMySQL(t, 2)
	conn, err := busy.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	began := time.Now()
	c, err = sqldialect.ClusterOf(t.Context(), sqldialect.MySQL{}, busy)
	require.NoError(t, err)
	require.Len(t, c.Nodes, 1)
	require.Less(t, time.Since(began), 10*time.Second, "a busy pool yields fewer connections, not a stuck Start")
}

// PostgreSQL and SQLite form no multi-primary cluster: nothing to read.
func TestClusterOfOtherServers(t *testing.T) {
	t.Parallel()
	for _, d := range []sqldialect.Dialect{sqldialect.Postgres{}, sqldialect.SQLite{}} {
		c, err := sqldialect.ClusterOf(t.Context(), d, nil)
		require.NoError(t, err)
		require.Equal(t, sqldialect.Cluster{}, c)
	}
}
