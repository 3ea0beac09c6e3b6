package bunqueue_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// galeraEnv lists the DSNs of the nodes of a Galera cluster, comma
// separated, for the tests of multi-primary clusters. scripts/galera.sh
// starts such a cluster on this machine; `scripts/galera.sh test` runs
// these tests against it.
const galeraEnv = "BUNQUEUE_GALERA_DSNS"

// galeraCluster is the cluster scripts/galera.sh started for this test
// binary, if it did.
var galeraCluster struct {
	once sync.Once
	dsns string
	err  error
}

// galeraDSNs returns the DSNs of the Galera nodes in BUNQUEUE_GALERA_DSNS.
// Without it, the reliability suite's long part starts the cluster with
// scripts/galera.sh (left running for the next run; `scripts/galera.sh
// stop` stops it), and any other run skips the test.
func galeraDSNs(t *testing.T) []string {
	t.Helper()
	dsns := os.Getenv(galeraEnv)
	if dsns == "" && relLong() {
		galeraCluster.once.Do(func() {
			cmd := exec.Command("../../scripts/galera.sh", "start")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			galeraCluster.dsns, galeraCluster.err = lines[len(lines)-1], err
		})
		require.NoError(t, galeraCluster.err, "scripts/galera.sh start (see its output, and /tmp/bunqueue-galera/node*/error.log)")
		dsns = galeraCluster.dsns
	}
	if dsns == "" {
		t.Skipf("needs a Galera cluster: set %s to its nodes' DSNs, comma separated (scripts/galera.sh start prints them; scripts/galera.sh test runs these tests)", galeraEnv)
	}
	list := strings.Split(dsns, ",")
	require.GreaterOrEqual(t, len(list), 2, "%s lists the DSNs of at least two nodes", galeraEnv)
	return list
}

// openConnector returns a bun DB over connector, closed when the test
// ends.
func openConnector(t *testing.T, connector driver.Connector) *bun.DB {
	t.Helper()
	db := bun.NewDB(sql.OpenDB(connector), mysqldialect.New())
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}

// nodeConnector returns the connector of go-sql-driver/mysql for dsn.
func nodeConnector(t *testing.T, dsn string) driver.Connector {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	return connector
}

// openNode returns a bun DB whose connections all reach the node at dsn.
func openNode(t *testing.T, dsn string) *bun.DB {
	t.Helper()
	return openConnector(t, nodeConnector(t, dsn))
}

// alternating opens each new connection on the next of its nodes in turn,
// as a proxy that balances connections does.
type alternating struct {
	next  atomic.Uint64
	nodes []driver.Connector
}

func (a *alternating) Connect(ctx context.Context) (driver.Conn, error) {
	return a.nodes[(a.next.Add(1)-1)%uint64(len(a.nodes))].Connect(ctx)
}

func (a *alternating) Driver() driver.Driver { return a.nodes[0].Driver() }

// openAlternating returns a bun DB whose connections reach the nodes at
// dsns in turn.
func openAlternating(t *testing.T, dsns []string) *bun.DB {
	t.Helper()
	a := &alternating{}
	for _, dsn := range dsns {
		a.nodes = append(a.nodes, nodeConnector(t, dsn))
	}
	return openConnector(t, a)
}

// clusterClient returns a client over db, with strict as its
// StrictClusterRouting, and a function that returns what it logged.
func clusterClient(t *testing.T, db *bun.DB, strict bool) (*bunqueue.Client, func() string) {
	t.Helper()
	log, logged := leaseCaptureLogger(t)
	c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: log, PollInterval: 50 * time.Millisecond, StrictClusterRouting: strict})
	require.NoError(t, err)
	return c, logged
}

// clusterWarnings returns the lines of a text log at WARN that speak of
// nodes or clusters.
func clusterWarnings(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") && (strings.Contains(line, "node") || strings.Contains(line, "cluster")) {
			out = append(out, line)
		}
	}
	return out
}

// On a lone server, Start says nothing of clusters or nodes, and
// StrictClusterRouting lets it start.
func TestStartOnOneServerNoClusterWarning(t *testing.T) {
	t.Parallel()
	c, logged := clusterClient(t, dbtest.Open(t, 0), true)
	start(t, c)
	require.Empty(t, clusterWarnings(logged()), "no warning about clusters on a lone server:\n%s", logged())
}

// A pool on one node of the cluster: Start warns that the database is a
// node of a Galera cluster, naming the fix, and starts, strict or not.
func TestGaleraStartOnOneNode(t *testing.T) {
	t.Parallel()
	dsns := galeraDSNs(t)
	for _, strict := range []bool{false, true} {
		c, logged := clusterClient(t, openNode(t, dsns[0]), strict)
		start(t, c)
		warnings := clusterWarnings(logged())
		require.Len(t, warnings, 1, "log:\n%s", logged())
		require.Contains(t, warnings[0], "is a node of a Galera cluster of ")
		require.Contains(t, warnings[0], "Route every process's workers to one node")
		require.Contains(t, warnings[0], "wsrep_sync_wait does not help")
		require.Contains(t, warnings[0], "cluster=Galera")
	}
}

// A pool whose connections reach different nodes: with
// StrictClusterRouting, Start refuses it, naming the nodes. Without, Start
// warns that the pool reaches several nodes, naming them, or, when the
// startup probe's two connections reached two nodes (the probe then sees
// another node's locked row as unlocked), fails with the probe's error,
// explained by the nodes.
func TestGaleraStartOnSeveralNodes(t *testing.T) {
	t.Parallel()
	dsns := galeraDSNs(t)
	const nodes = `the connection pool reaches \d nodes of a Galera cluster of \d+ \(.+\(.+:\d+\), .+\)`

	strict, _ := clusterClient(t, openAlternating(t, dsns), true)
	err := strict.Start(t.Context())
	require.Error(t, err)
	t.Log(err)
	require.Regexp(t, nodes+` \(Config.StrictClusterRouting refuses it\)`, err.Error())
	require.Contains(t, err.Error(), "Route every process's workers to one node")
	require.NoError(t, strict.Stop(t.Context()))

	c, logged := clusterClient(t, openAlternating(t, dsns), false)
	if err := c.Start(t.Context()); err != nil {
		t.Log(err)
		require.Regexp(t, nodes+`; the startup probe's two connections may have reached two of them`, err.Error())
		require.NoError(t, c.Stop(t.Context()))
		return
	}
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	warnings := clusterWarnings(logged())
	require.Len(t, warnings, 1, "log:\n%s", logged())
	require.Regexp(t, nodes, warnings[0])
	require.Contains(t, warnings[0], "this process's own workers will run one row twice at once")
}
