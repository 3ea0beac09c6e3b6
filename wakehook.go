package bunqueue

import (
	"context"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/wake"
)

// QueryHook returns a bun query hook that wakes this client's sleeping
// workers when a statement run through the hooked DB may have put rows in
// their queues, so that the rows need not wait for the poll interval.
// Workers in other processes find the rows by polling, or on PostgreSQL
// when a notification wakes them (Config.Listener). Give it to
// the *bun.DB the app writes through:
//
//	appDB := db.WithQueryHook(client.QueryHook()) // a copy of db with the hook
//
// (bun's older AddQueryHook works too, but is not safe while queries run.)
//
// The hook watches INSERT, REPLACE and UPDATE statements (with IGNORE, ON
// DUPLICATE KEY UPDATE, multi-table UPDATE; from query builders and raw SQL
// alike, read from the SQL text) on the tables of the queues this client
// started: each queue's model table, and bunqueue_jobs for the jobs queues,
// so that Enqueue through a hooked DB or bun.Tx wakes jobs workers too. For
// each such statement that changed rows it wakes one sleeping worker of
// every queue over that table (a worker that then claims a full batch
// wakes the next one):
//   - outside a transaction, as soon as the statement returns;
//   - in a transaction begun through the hooked DB and run with the
//     context bun gives the transaction (the ctx that RunInTx passes to its
//     function), when the transaction commits; a rollback wakes nothing;
//   - in a transaction but run with another context (typically
//     tx.NewInsert()….Exec(ctx) after db.BeginTx(ctx, nil)), the statement
//     cannot be tied to its transaction: it wakes at once and again after
//     the next commit the hook sees, which may be another transaction's.
//
// A wake that comes too early costs one claim that finds nothing; a wake
// that never comes costs the poll interval. The hook does not see writes
// made by other processes or through other DBs (polling finds them),
// DELETEs, or writes to other tables that make rows match a queue's query
// (a join, a NOT EXISTS). Writes undone by ROLLBACK TO SAVEPOINT still
// wake on commit; a statement run on the DB itself with a transaction's
// context counts as part of that transaction, and is lost with it if it
// rolls back. A write made with the context of one of the client's own
// workers (a handler, the library's claim and completion) does not wake
// that worker's queue: the worker claims again as soon as its batch ends.
// An INSERT into bunqueue_jobs wakes only the jobs queues whose names
// appear in it as string literals, or all of them if none does; an UPDATE
// of it made with a jobs worker's context (the library's leases,
// heartbeats and retries) wakes no jobs queue.
//
// The hook also ends the send spans of Enqueue and EnqueueMany given a
// bun.Tx and the context bun gives the transaction, as for the wake-up:
// such a span ends when the transaction does, at COMMIT as usual (with
// error.type and status Error if COMMIT failed), or at ROLLBACK with
// error.type "rolled_back" and status Error, since the job never
// existed; only a committed job counts in messaging.client.sent.messages.
// Without the hook, or with another context, the span ends when Enqueue
// returns and a rollback leaves it unmarked, as does a ROLLBACK TO
// SAVEPOINT.
//
// Cost: the hook allocates one context value per transaction, and for
// every other statement reads its first word; for an INSERT or UPDATE it
// parses the table names at the start of the statement and looks each up
// in a map. While a transaction begun through it is open, each statement
// costs two context lookups more. Only statements on watched tables do
// more: a context lookup and non-blocking sends on buffered channels. It is safe for concurrent
// use, never blocks and starts no goroutines. Before Start it wakes
// nothing. Each call returns a new hook; add one per DB.
func (c *Client) QueryHook() bun.QueryHook {
	return wake.NewHook(&c.watching, handOverKey{})
}

// The query hook's mechanics are in internal/wake; these names are the
// ones client.go, tracing.go and notify.go use.
type (
	watch       = wake.Watch       // the runners the hook wakes, by table
	sendKey     = wake.SendKey     // keys the *pendingSend of an Enqueue through a bun.Tx
	pendingSend = wake.PendingSend // a send span the hook may tie to its transaction
)

// newWatch maps the tables of the runners Start built to the runners:
// first the queues', then the jobs queues'.
func (c *Client) newWatch(runners []*runner) *watch {
	w := &watch{}
	for i, r := range runners {
		t := wake.Target{Queue: &r.Queue}
		t.Schema, t.Table = c.runnerTable(r)
		if i >= len(c.queues) {
			t.Jobs = true
			for _, queue := range []string{r.Name, strings.TrimPrefix(r.Name, "jobs:")} {
				if _, ok := c.cfg.JobQueues[queue]; ok {
					t.Literal = string(c.db.Dialect().AppendString(nil, queue))
					break
				}
			}
		}
		w.Add(t)
	}
	return w
}

// sendEnd is how a send span ends: with the send's own error, the
// COMMIT's, or rolled back.
type sendEnd struct {
	rolledBack bool
	err        error
}

// holdSend hands finish to the transaction that the send of ctx is tied
// to, and reports whether it did: finish then runs at COMMIT or ROLLBACK.
func holdSend(ctx context.Context, finish func(sendEnd)) bool {
	p, _ := ctx.Value(sendKey{}).(*pendingSend)
	return p.Tied() && p.Hold(func(end wake.SendEnd) { finish(sendEnd{end.RolledBack, end.Err}) }) // Tied first: no closure to allocate
}
