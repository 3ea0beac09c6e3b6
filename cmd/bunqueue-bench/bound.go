package main

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// The design-bound scenarios run, in plain SQL and with nothing else of a
// queue, the statements bunqueue's transactions are made of (DESIGN.md:
// lock the row by key, run the handler, re-check by primary key that it
// left the query, commit), on keys handed out in advance: no feed, no
// contention between workers, no handler but its one write. They are what
// any implementation of that design could reach on this server, at most.

// designBound is the any-table scenarios' transaction: claim perTx rows
// by key, then per row (in a savepoint when there are several) the
// handler's UPDATE, then the re-check, then COMMIT.
func (b *bench) designBound(ctx context.Context, perTx int) (result, error) {
	bl, err := b.itemsBacklog(ctx, float64(min(perTx, 2)))
	if err != nil {
		return result{}, err
	}
	defer bl.close()
	return b.measureSQL(ctx, bl.db, bl.first, bl.last, perTx, func(ids []int64) []step {
		claim, recheck := b.boundQueries(inList(ids), len(ids))
		steps := []step{{sql: claim, query: true, count: true}}
		for i, id := range ids {
			if len(ids) > 1 {
				steps = append(steps, step{sql: "SAVEPOINT bunqueue_" + strconv.Itoa(i)})
			}
			steps = append(steps, step{sql: "UPDATE " + itemsTable + " SET status = 'sent' WHERE id = " + strconv.FormatInt(id, 10)})
		}
		return append(steps, step{sql: recheck, query: true, none: true})
	}, bl.note)
}

// boundQueries returns the any-table design bound's claim of the rows of
// keys (an IN list of n keys, or placeholders) and its re-check, as
// bunqueue words them: by primary key, with the queue's conditions.
func (b *bench) boundQueries(keys string, n int) (claim, recheck string) {
	from := itemsTable + " AS bench_item " + b.dialect.ForcePrimary() +
		" WHERE status = 'waiting' AND (retry_at IS NULL OR retry_at <= " + b.dialect.Now() + ")" +
		" AND id IN (" + keys + ") ORDER BY id LIMIT " + strconv.Itoa(n)
	return "SELECT id, status, retry_at FROM " + from + " FOR " + b.dialect.SkipLocked(), "SELECT id FROM " + from
}

// designBoundPrepared is designBound at one row per transaction with its
// claim, UPDATE and re-check prepared on the server (once per connection,
// by database/sql) and run with the key as an argument, where bunqueue
// sends bun's text: what prepared statements could save.
func (b *bench) designBoundPrepared(ctx context.Context) (result, error) {
	bl, err := b.itemsBacklog(ctx, 1)
	if err != nil {
		return result{}, err
	}
	defer bl.close()
	arg := "?"
	if _, pg := b.sql.(postgresBench); pg {
		arg = "$1"
	}
	claim, recheck := b.boundQueries(arg, 1)
	var stmts []*sql.Stmt
	for _, q := range []string{claim, "UPDATE " + itemsTable + " SET status = 'sent' WHERE id = " + arg, recheck} {
		st, err := bl.db.DB.PrepareContext(ctx, q)
		if err != nil {
			return result{}, err
		}
		defer st.Close()
		stmts = append(stmts, st)
	}
	return b.measureSQL(ctx, bl.db, bl.first, bl.last, 1, func(ids []int64) []step {
		args := []any{ids[0]}
		return []step{
			{stmt: stmts[0], args: args, query: true, count: true},
			{stmt: stmts[1], args: args},
			{stmt: stmts[2], args: args, query: true, none: true},
		}
	}, func(dry bool) string { return bl.note(dry) + ", statements prepared once per connection" })
}

// designBoundJobs is a lock-mode jobs transaction: claim perTx jobs by
// key, a savepoint per job (jobs record failures through OnError, which
// needs the job still locked), then one DELETE for them all, then
// COMMIT. Jobs need no re-check: their completion always takes them out.
func (b *bench) designBoundJobs(ctx context.Context, perTx int) (result, error) {
	const queue = "bench_design_bound"
	bl, err := b.jobsBacklog(ctx, queue, float64(min(perTx, 2)))
	if err != nil {
		return result{}, err
	}
	defer bl.close()
	claim := "SELECT id, queue, kind, args, metadata, priority, state, attempts, max_attempts, run_at, created_at," +
		" completed_at, last_error, unique_key, lease_token, trace_context FROM " + jobsTable + " AS j " + b.dialect.ForcePrimary() +
		" WHERE queue = '" + queue + "' AND state = 0 AND run_at <= " + b.dialect.Now()
	return b.measureSQL(ctx, bl.db, bl.first, bl.last, perTx, func(ids []int64) []step {
		list := inList(ids)
		steps := []step{{sql: claim + " AND id IN (" + list + ") ORDER BY priority, run_at, id LIMIT " + strconv.Itoa(len(ids)) +
			" FOR " + b.dialect.SkipLocked(), query: true, count: true}}
		for i := range ids {
			steps = append(steps, step{sql: "SAVEPOINT bunqueue_" + strconv.Itoa(i)})
		}
		// Only this queue's: other processes' jobs may have ids among
		// these (bunqueue deletes only the jobs its claim locked).
		return append(steps, step{sql: "DELETE FROM " + jobsTable + " WHERE id IN (" + list + ") AND queue = '" + queue + "'"})
	}, bl.note)
}

// inList formats ids for an IN (…) list.
func inList(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
