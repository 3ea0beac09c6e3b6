package sqldialect

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Cluster is what Start learns of the servers a connection pool reaches:
// whether they are nodes of a multi-primary cluster, whose row locks are
// local to each node, and how many distinct servers the pool's
// connections reached.
type Cluster struct {
	// Kind names the multi-primary cluster a server reached is a node of:
	// "Galera" or "Group Replication"; empty for none.
	Kind string
	// Size is the number of its nodes (its members online, for Group
	// Replication).
	Size int
	// Nodes names the distinct servers the connections reached, in the
	// order they were first reached.
	Nodes []string
}

// ClusterConns is the most connections of its pool ClusterOf holds at
// once.
const ClusterConns = 4

// clusterWait bounds how long ClusterOf waits for each connection after
// the first: a pool that others keep busy yields fewer, not a stuck Start.
const clusterWait = 2 * time.Second

// server is what one connection tells of the server it reaches.
type server struct {
	id   string // distinct for distinct servers (see MySQL.server)
	name string // for people
	kind string // as Cluster.Kind
	size int    // as Cluster.Size
}

// serverReader is implemented by the dialects whose servers can form
// multi-primary clusters.
type serverReader interface {
	server(ctx context.Context, tx bun.Tx) (server, error)
}

// ClusterOf holds up to ClusterConns connections of db's pool at once
// (no more than the pool allows), each in a transaction, as the workers'
// claims are, so that a proxy routes them as it routes the claims, and
// reads through each the server it reaches. Dialects whose servers form no
// multi-primary cluster (PostgreSQL, SQLite) return the zero Cluster.
func ClusterOf(ctx context.Context, d Dialect, db *bun.DB) (Cluster, error) {
	r, ok := d.(serverReader)
	if !ok {
		return Cluster{}, nil
	}
	n := ClusterConns
	if most := db.Stats().MaxOpenConnections; most > 0 {
		n = min(n, most)
	}
	var c Cluster
	var ids []string
	for i := range n {
		tx, release, err := holdTx(ctx, db, i > 0)
		if err != nil && i > 0 {
			break // the servers of the connections held so far
		}
		if err != nil {
			return Cluster{}, fmt.Errorf("read which servers the connection pool reaches: %w", err)
		}
		defer release() // hold every connection until all are read
		s, err := r.server(ctx, tx)
		if err != nil {
			return Cluster{}, fmt.Errorf("read which servers the connection pool reaches: %w", err)
		}
		if s.kind != "" && s.size > c.Size {
			c.Kind, c.Size = s.kind, s.size
		}
		if !slices.Contains(ids, s.id) {
			ids = append(ids, s.id)
			c.Nodes = append(c.Nodes, s.name)
		}
	}
	return c, nil
}

// holdTx takes a connection of db, waiting at most clusterWait for it if
// bounded, and begins a transaction on it; release rolls it back and
// returns the connection to the pool.
func holdTx(ctx context.Context, db *bun.DB, bounded bool) (bun.Tx, func(), error) {
	cctx := ctx
	if bounded {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, clusterWait)
		defer cancel() // the wait for a connection only: its transaction keeps ctx
	}
	conn, err := db.Conn(cctx)
	if err != nil {
		return bun.Tx{}, nil, err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return bun.Tx{}, nil, err
	}
	return tx, func() { _ = tx.Rollback(); _ = conn.Close() }, nil
}

// server implements serverReader. A Galera node is one with wsrep_on and a
// cluster (wsrep_cluster_size) of more than one node; a Group Replication
// member in multi-primary mode is one whose group_replication_single_primary_mode
// is OFF in a group of several members online, every one of them a
// primary. The plugins' variables exist only where they are loaded, and
// SHOW … WHERE lists none that does not, so a server without them (MySQL
// without Galera, MariaDB without Group Replication) reads as no cluster.
//
// Distinct servers are told apart by wsrep_gcomm_uuid on Galera (unique
// per node, while wsrep_node_name defaults to the host name and server_id
// is often the same on every node), by server_uuid on MySQL (a Group
// Replication member's id), and elsewhere by hostname, port and server_id
// together, which two servers reached at once cannot all share.
func (MySQL) server(ctx context.Context, tx bun.Tx) (server, error) {
	v, err := showGlobal(ctx, tx, "VARIABLES", "hostname", "port", "server_id", "server_uuid",
		"wsrep_on", "wsrep_node_name", "group_replication_single_primary_mode")
	if err != nil {
		return server{}, err
	}
	st, err := showGlobal(ctx, tx, "STATUS", "wsrep_cluster_size", "wsrep_gcomm_uuid")
	if err != nil {
		return server{}, err
	}
	s := server{name: v["hostname"] + ":" + v["port"], id: v["hostname"] + ":" + v["port"] + "/" + v["server_id"]}
	if v["server_uuid"] != "" {
		s.id = v["server_uuid"]
	}
	if size, _ := strconv.Atoi(st["wsrep_cluster_size"]); strings.EqualFold(v["wsrep_on"], "ON") && size > 1 {
		s.kind, s.size = "Galera", size
		s.name = v["wsrep_node_name"] + " (" + s.name + ")"
		if st["wsrep_gcomm_uuid"] != "" {
			s.id = st["wsrep_gcomm_uuid"]
		}
	}
	if strings.EqualFold(v["group_replication_single_primary_mode"], "OFF") {
		var members int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM performance_schema.replication_group_members WHERE MEMBER_STATE = 'ONLINE'").Scan(&members); err != nil {
			return server{}, fmt.Errorf("read the members of the replication group: %w", err)
		}
		if members > 1 {
			s.kind, s.size = "Group Replication", members
		}
	}
	return s, nil
}

// showGlobal returns the global variables (what "VARIABLES") or status
// variables ("STATUS") of the given names that the server has, by lower
// case name.
func showGlobal(ctx context.Context, tx bun.Tx, what string, names ...string) (map[string]string, error) {
	rows, err := tx.QueryContext(ctx, "SHOW GLOBAL "+what+" WHERE Variable_name IN ('"+strings.Join(names, "', '")+"')")
	if err != nil {
		return nil, fmt.Errorf("read the server's global %s: %w", strings.ToLower(what), err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, fmt.Errorf("read the server's global %s: %w", strings.ToLower(what), err)
		}
		out[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the server's global %s: %w", strings.ToLower(what), err)
	}
	return out, nil
}
