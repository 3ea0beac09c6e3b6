package bunqueue

import (
	"context"

	"github.com/bunqueue/bunqueue/internal/servercheck"
)

// checkServer runs the dialect's CheckServer, and warns when the database
// is a node of a multi-primary cluster, or refuses a pool that reaches
// several nodes under Config.StrictClusterRouting (see
// servercheck.Server).
func (c *Client) checkServer(ctx context.Context) error {
	return servercheck.Server(ctx, c.dialect, c.db, c.tables.Probe, c.cfg.StrictClusterRouting, c.cfg.Logger)
}
