package bunqueue

import (
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/queryshape"
)

// The engine builds every statement of a queue from the queue's query: it
// adds the keys it reads or claims, a LIMIT, its lock clause, its index
// hints and the columns it needs, and it takes each row the query returns
// for a row of the model's table, which a claim locks. Client.Add refuses
// a query that sets any of these or that returns something else
// (checkShape, with internal/queryshape), since the engine would replace
// the clause or run it wrong; Start runs each queue's claim once (checkQuery), so that a query
// the server refuses fails Start instead of every poll.

// checkShape applies the queue's query function to a select over the model
// and returns an error naming the queue and each clause it set that the
// engine cannot run (see queryshape.Find), or what else keeps it from
// being a queue's query. db renders the SQL as the server's dialect writes it.
func (q *Queue[T]) checkShape(db *bun.DB, eng *claim.Queue[T]) (err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("bunqueue: queue %q: "+format, append([]any{q.name}, args...)...)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fail("the query function panicked: %v", r)
		}
	}()
	model := new([]T)
	given := db.NewSelect().Model(model)
	sel := eng.Apply(given)
	switch {
	case sel != given:
		return fail("the query function must add to the query it is given and return it, not another query")
	case sel.GetModel() == nil || sel.GetModel().Value() != any(model):
		return fail("the query function must not change the query's model (SelectQuery.Model): a queue reads and claims rows of its own model")
	}
	found, err := queryshape.Find(db, sel, db.NewSelect().Model(new([]T)))
	switch {
	case err != nil:
		return fail("its query: %w", err)
	case found != "":
		return fail("its query must not set %s", found)
	}
	return nil
}
