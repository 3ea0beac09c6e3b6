package bunqueue

import (
	"context"
	"fmt"
	"strings"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// checkListPlans explains, at Start of a client that runs jobs, a
// statement of each shape that JobList sends (each table, state and
// index), and warns about one that its index does not serve because the
// index is missing (a plan that scans, sorts or reads another index, on
// a table without it), as checkPlans does for the queues' reads; with Config.StrictQueryPlans it returns that as
// an error. A listing served by no index reads the whole table for each
// page: on a million jobs, the dashboard's and the CLI's pages would take
// seconds. The indexes are those of schema version 4.
//
// The explains run in a transaction that makes the planner take an index
// wherever one serves (Dialect.PreferIndexes), since on a small table it
// may rightly prefer to scan; on MySQL and SQLite the statements name
// their index, and a missing one fails the explain.
func (c *Client) checkListPlans(ctx context.Context) error {
	if !c.runsJobs() {
		return nil
	}
	for _, l := range c.jobSQL().Listings(c.firstJobQueue(), "bunqueue.plan-check", listPageSize, JobListSearchRows) {
		query := c.db.QueryGen().FormatQuery(l.Query, l.Args...)
		plan, err := c.explainIndexed(ctx, query)
		var msg string
		switch {
		case err != nil:
			msg = fmt.Sprintf("bunqueue: JobList: explaining a listing that should read the index %s failed: %v", l.Index, err)
		case len(plan.Problems()) == 0 && strings.Contains(plan.String(), l.Index):
			continue
		case c.hasIndex(ctx, l.Index):
			// The planner preferred another plan, as it may while the
			// table is small: the index is there for when it grows.
			c.cfg.Logger.DebugContext(ctx, "bunqueue: JobList: a listing's plan does not read its index, which exists",
				"index", l.Index, "plan", plan.String())
			continue
		default:
			msg = fmt.Sprintf("bunqueue: JobList: a listing's plan does not read its index, which is missing (plan: %s)", plan)
		}
		msg += fmt.Sprintf("; the index %s of schema version 4 serves it: run bunqueue.Migrate (or apply bunqueue.MigrationSQL)", l.Index)
		if c.cfg.StrictQueryPlans {
			return fmt.Errorf("%s; Config.StrictQueryPlans is set", msg)
		}
		c.cfg.Logger.WarnContext(ctx, msg, "query", query)
	}
	return nil
}

// listPageSize is the LIMIT of the listings that checkListPlans explains:
// a large page of the dashboard's.
const listPageSize = 100

// explainIndexed explains query in a transaction that makes the planner
// prefer indexes, and rolls it back.
func (c *Client) explainIndexed(ctx context.Context, query string) (sqldialect.Plan, error) {
	var plan sqldialect.Plan
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return plan, err
	}
	defer func() { _ = tx.Rollback() }()
	for _, set := range c.dialect.PreferIndexes() {
		if _, err := tx.ExecContext(ctx, set); err != nil {
			return plan, err
		}
	}
	return c.dialect.Explain(ctx, tx, query)
}

// hasIndex reports whether the jobs tables have index; a failed look
// counts as yes, the check being advice.
func (c *Client) hasIndex(ctx context.Context, index string) bool {
	ok, err := c.jobSQL().HasIndex(ctx, c.db, index)
	if err != nil {
		c.cfg.Logger.DebugContext(ctx, "bunqueue: JobList: look for a listing's index", "index", index, "error", err)
		return true
	}
	return ok
}

// firstJobQueue returns the name of one of the jobs queues the client
// runs, for the explains' filter by queue.
func (c *Client) firstJobQueue() string {
	for name := range c.cfg.JobQueues {
		return name
	}
	return QueueDefault
}
