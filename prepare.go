package bunqueue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
)

// prepared runs fn, in tx, with the statement prepared for text, in a
// CLIENT span named for op (SELECT, DELETE) and table. ok is false when
// text is not prepared (yet): nothing ran, and the caller runs it in text.
// A statement the server refused (Dialect.Refused: not a conflict, a kill
// or a lost connection) is dropped, and its text runs as it is for a
// while; one the server session did not have (Dialect.StatementLost)
// turns every prepared statement off, and fails with errPreparedLost, so
// that its transaction runs again at once, in text.
func (c *Client) prepared(ctx context.Context, tx bun.Tx, op, table, text string, fn func(ctx context.Context, st *sql.Stmt) error) (ok bool, err error) {
	stmt := c.stmts.Get(text)
	if stmt == nil {
		return false, nil
	}
	ctx, span := c.tel.StartStatement(ctx, c.dialect.System(), op, table, text)
	ts := tx.Tx.StmtContext(ctx, stmt)
	err = fn(ctx, ts)
	_ = ts.Close()
	c.tel.EndSpan(span, err)
	if err == nil {
		return true, nil
	}
	if c.dialect.StatementLost(err) && ctx.Err() == nil {
		c.preparedOff(ctx, "a prepared statement was missing on the server session, or there already", err)
		return true, fmt.Errorf("%w: %w", errPreparedLost, err)
	}
	if c.dialect.Refused(err) && ctx.Err() == nil {
		c.stmts.Drop(text)
	}
	return true, fmt.Errorf("%w (prepared statement)", err)
}
