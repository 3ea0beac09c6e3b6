package bunqueue

import (
	"context"
	"fmt"
	"strings"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// planLimit is the LIMIT of the read the plan check explains: a few
// batches' worth, so that the server plans a read of many rows.
const planLimit = 100

// checkPlans explains every queue's read of its waiting rows, and warns
// about a plan that scans or sorts, naming the queue, the plan and an
// index that would serve the query; with Config.StrictQueryPlans it
// returns that as an error instead, and also when a query cannot be
// explained.
func (c *Client) checkPlans(ctx context.Context, runners []*runner) error {
	for _, r := range runners {
		if r.Work == nil {
			continue
		}
		sel, table := r.Explain()
		schema, name := c.runnerTable(r)
		query, err := sel.Limit(planLimit).AppendQuery(c.db.QueryGen(), nil)
		var plan sqldialect.Plan
		if err == nil {
			plan, err = c.dialect.Explain(ctx, c.db, string(query))
		}
		if err != nil {
			err = fmt.Errorf("bunqueue: queue %q: explain its query: %w", r.Name, err)
			if c.cfg.StrictQueryPlans {
				return err
			}
			c.cfg.Logger.WarnContext(ctx, "bunqueue: could not check the plan of a queue's query", "queue", r.Name, "error", err)
			continue
		}
		for i := range plan.Steps {
			if plan.Steps[i].Table == table.Alias {
				plan.Steps[i].Table = name // the name the user knows
			}
		}
		problems := plan.Problems()
		if len(problems) == 0 {
			continue
		}
		pks := make([]string, len(table.PKs))
		for i, f := range table.PKs {
			pks[i] = f.Name
		}
		index := "one whose columns are those of the WHERE's equality conditions, followed by those of the ORDER BY " +
			"(the query is too complex to name them)"
		advice, ok, err := c.dialect.SuggestIndex(ctx, c.db, string(query), schema, name, table.Alias, pks)
		switch {
		case err != nil:
			c.cfg.Logger.DebugContext(ctx, "bunqueue: look for an index that serves a queue's query", "queue", r.Name, "error", err)
		case ok && advice.Existing != "":
			// The server preferred another plan, as it may while the
			// table is small: the index is there for when it grows.
			c.cfg.Logger.DebugContext(ctx, "bunqueue: the plan of a queue's query scans or sorts, but an index serves the query",
				"queue", r.Name, "plan", plan.String(), "index", advice.Existing)
			continue
		case ok:
			index = advice.Create + " (a suggestion: the columns of the WHERE's equality conditions, then of the ORDER BY, then the primary key)"
		}
		msg := fmt.Sprintf("bunqueue: queue %q: its query's plan has %s, so each read of the queue examines far more rows than it returns "+
			"(plan: %s); an index that would serve it: %s", r.Name, strings.Join(problems, " and "), plan, index)
		if c.cfg.StrictQueryPlans {
			return fmt.Errorf("%s; Config.StrictQueryPlans is set", msg)
		}
		c.cfg.Logger.WarnContext(ctx, msg, "queue", r.Name, "query", string(query))
	}
	return nil
}
