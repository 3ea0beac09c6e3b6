// Package servercheck checks, at Start, whether the database servers the
// pool reaches can keep bunqueue's promise of one worker per row at a
// time: the nodes of a multi-primary cluster do not share row locks. It
// asks the servers through internal/sqldialect and logs what it warns
// of.
package servercheck

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// clusterLocks says why workers on several nodes break the promise that
// one item has one worker at a time, and what to do about it.
const clusterLocks = "row locks are local to a node, so SKIP LOCKED on two nodes hands one row to two workers at once: " +
	"handlers run twice and external effects repeat; certification then rolls one of the two commits back " +
	"(error 1213, a failed batch in the log), so committed effects stay once, and a UniqueKey enqueue on two nodes at once " +
	"fails with 1213 instead of reporting the duplicate. Route every process's workers to one node " +
	"(a single-writer address in the proxy, such as one writer in ProxySQL's hostgroup or one active HAProxy backend, " +
	"or one node's own address); wsrep_sync_wait does not help: it orders reads, not locks"

// Server runs the dialect's CheckServer on db, with the probe table probe, and reads which servers
// the pool reaches: it warns when the database is a node of a multi-primary
// cluster (Galera, MySQL Group Replication in multi-primary mode), and
// more strongly when the pool itself reaches several nodes, which strict
// (Config.StrictClusterRouting) refuses before the probe. The probe's two
// connections on two nodes do not see each other's locks: its failure on
// such a pool says so.
func Server(ctx context.Context, d sqldialect.Dialect, db *bun.DB, probe string, strict bool, log *slog.Logger) error {
	cl, clErr := sqldialect.ClusterOf(ctx, d, db)
	several := clErr == nil && len(cl.Nodes) > 1
	if several && strict {
		return fmt.Errorf("bunqueue: the connection pool reaches %s (Config.StrictClusterRouting refuses it): %s", clusterNodes(cl), clusterLocks)
	}
	if err := d.CheckServer(ctx, db, probe); err != nil {
		if several {
			return fmt.Errorf("bunqueue: the connection pool reaches %s; the startup probe's two connections may have reached two of them, "+
				"which do not see each other's row locks: %w; %s", clusterNodes(cl), err, clusterLocks)
		}
		return err
	}
	switch {
	case clErr != nil && strict:
		return fmt.Errorf("bunqueue: Config.StrictClusterRouting: %w", clErr)
	case clErr != nil:
		log.WarnContext(ctx, "bunqueue: could not tell whether the database is a multi-primary cluster", "error", clErr)
	case several:
		log.WarnContext(ctx, "bunqueue: the connection pool reaches "+clusterNodes(cl)+
			": this process's own workers will run one row twice at once; "+clusterLocks,
			"cluster", cl.Kind, "cluster_size", cl.Size, "nodes", cl.Nodes)
	case cl.Kind != "":
		log.WarnContext(ctx, "bunqueue: the database is a node of a "+cl.Kind+" cluster of "+fmt.Sprint(cl.Size)+
			" nodes: workers of processes that reach other nodes will run rows this process runs; "+clusterLocks,
			"cluster", cl.Kind, "cluster_size", cl.Size, "node", cl.Nodes[0])
	}
	return nil
}

// clusterNodes names the nodes the pool reaches, and their cluster.
func clusterNodes(cl sqldialect.Cluster) string {
	of := "different database servers"
	if cl.Kind != "" {
		of = fmt.Sprintf("nodes of a %s cluster of %d", cl.Kind, cl.Size)
	}
	return fmt.Sprintf("%d %s (%s)", len(cl.Nodes), of, strings.Join(cl.Nodes, ", "))
}
