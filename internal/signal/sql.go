package signal

import (
	"context"
	"strings"

	"github.com/uptrace/bun"
)

// notifyComment tags the statement that sends messages.
const notifyComment = "/* bunqueue: notify */ "

// Schema returns, through db (on PostgreSQL), the schema where the table
// named table is found on the connection's search_path, or, if there is
// none, the first schema of the search_path: the schema of the channel
// of the processes that share that table (see Channel).
func Schema(ctx context.Context, db bun.IDB, table string) (string, error) {
	var schema string
	err := db.NewRaw("SELECT COALESCE((SELECT n.nspname FROM pg_class AS t JOIN pg_namespace AS n ON n.oid = t.relnamespace WHERE t.oid = to_regclass(?)), current_schema(), '')",
		table).Scan(ctx, &schema)
	return schema, err
}

// Send sends msgs on channel through db (on PostgreSQL), in one
// statement: within a transaction they are delivered when it commits
// (once each, however often they were sent in it), and never if it rolls
// back.
func Send(ctx context.Context, db bun.IDB, channel string, msgs ...Message) error {
	var sql strings.Builder
	sql.WriteString(notifyComment + "SELECT ")
	args := make([]any, 0, 2*len(msgs))
	for i, m := range msgs {
		payload, err := m.Encode()
		if err != nil {
			return err
		}
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString("pg_notify(?, ?)")
		args = append(args, channel, payload)
	}
	_, err := db.NewRaw(sql.String(), args...).Exec(ctx)
	return err
}
