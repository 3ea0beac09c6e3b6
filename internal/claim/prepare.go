package claim

import (
	"context"
	"database/sql"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/prepared"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// A worker's claim of its rows by their keys, the re-check that the rows
// left their queue, and a lone lock-mode job's DELETE run as statements
// prepared on the server, with the keys as their arguments: the same text
// every time, which the server parses and plans once per connection
// instead of once per batch, and a round trip each. (Run in text, a
// statement whose keys are written into it is new every time: a driver
// that prepares each new text first, as pgx does by default, pays a
// round trip more, and one more to drop it from its cache later.) A
// claim of n keys is written for n rounded up to a power of two (see
// prepared.KeyShape), so that a queue takes a handful of texts. bun formats its
// queries on the client, so the claim and the re-check are built by bun
// with parameter markers where the keys go, and run through
// database/sql; their text is the cache's key, so a queue whose query
// changes with every call (one that embeds the time, say) is never
// prepared. bun's query hooks do not see them: bunqueue starts their
// CLIENT spans itself.

// markers are the keys of a prepared statement's n rows: the dialect's
// parameter markers in place of their values, for onlyKeys.
func (q *Queue[T]) markers(n int) []engine.Key {
	pks := len(q.Table.PKs)
	keys := make([]engine.Key, n)
	for i := range keys {
		marks := make([]any, pks)
		for j := range marks {
			marks[j] = bun.Safe(q.Env.Dialect.Placeholder(i*pks + j + 1))
		}
		keys[i] = engine.Key{Vals: marks}
	}
	return keys
}

// keyArgs are the arguments of a prepared statement of shape keys for
// keys: their values in order, the last key's repeated to fill it.
func keyArgs(keys []engine.Key, shape int) []any {
	args := make([]any, 0, shape*len(keys[0].Vals))
	for i := range shape {
		args = append(args, keys[min(i, len(keys)-1)].Vals...)
	}
	return args
}

// claimPrepared claims the rows of keys that still wait and are not
// locked with a prepared statement. ok is false when there is none for
// their number yet (or they are too many): nothing ran, and the rows are
// claimed in text.
func (q *Queue[T]) claimPrepared(ctx context.Context, tx bun.Tx, keys []engine.Key) (items []T, ok bool, err error) {
	if len(keys) > prepared.MaxKeys {
		return nil, false, nil
	}
	shape := prepared.KeyShape(len(keys))
	items = make([]T, 0, len(keys))
	sel := q.onlyKeys(q.Apply(q.byKey(q.newClaim(tx, &items))), q.markers(shape)).Limit(int64(shape))
	ok, err = q.scanPrepared(ctx, tx, sqldialect.Locking(sel, q.Env.Dialect.SkipLocked()), keyArgs(keys, shape), &items)
	return items, ok, err
}

// recheckPrepared returns which rows of keys still match the queue's
// query, read with a prepared statement. ok is false when there is none
// for their number yet (or they are too many): nothing ran, and the
// re-check runs in text.
func (q *Queue[T]) recheckPrepared(ctx context.Context, tx bun.Tx, keys []engine.Key) (rows []T, ok bool, err error) {
	if len(keys) > prepared.MaxKeys {
		return nil, false, nil
	}
	shape := prepared.KeyShape(len(keys))
	rows = make([]T, 0, len(keys))
	sel := q.onlyKeys(q.Apply(q.byKey(q.selectFrom(tx, &rows))).Column(q.PKNames()...), q.markers(shape)).Limit(int64(shape))
	ok, err = q.scanPrepared(ctx, tx, sel, keyArgs(keys, shape), &rows)
	return rows, ok, err
}

// scanPrepared runs sel, whose key values are parameter markers for args,
// in tx as a statement prepared on the server, and scans its rows into
// dest. ok is false when the statement is not prepared (yet): nothing ran.
func (q *Queue[T]) scanPrepared(ctx context.Context, tx bun.Tx, sel *bun.SelectQuery, args []any, dest any) (ok bool, err error) {
	b, err := sel.AppendQuery(q.Env.DB.QueryGen(), nil)
	if err != nil {
		return false, nil // bun reports it again in text
	}
	return q.Env.Prepared(ctx, tx, "SELECT", q.Table.Name, string(b), func(ctx context.Context, st *sql.Stmt) error {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		return q.Env.DB.ScanRows(ctx, rows, dest) // closes rows
	})
}
