package histsql

import (
	"context"
	"strings"

	"github.com/uptrace/bun"
)

// Row is one history row as List reads it.
type Row struct {
	Queue  string
	Res    int64 // Minute or Quarter
	Bucket int64 // the bucket's start, Unix seconds
	Counts
	Depth int64 // the largest depth sampled in the bucket; -1 for none
}

// List returns the history rows of queue ("" for every queue) whose
// bucket starts at since (Unix seconds) or later.
func (s SQL) List(ctx context.Context, db bun.IDB, queue string, since int64) ([]Row, error) {
	q := "SELECT queue, res, bucket, " + strings.Join(countCols(), ", ") + ", " + strings.Join(maxCols, ", ") +
		" FROM " + s.t.History + " WHERE bucket >= ?"
	args := []any{since}
	if queue != "" {
		q += " AND queue = ?"
		args = append(args, queue)
	}
	rows, err := db.QueryContext(ctx, q+" ORDER BY bucket", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		dest := []any{&r.Queue, &r.Res, &r.Bucket, &r.Processed, &r.Failed, &r.Started}
		for i := range r.Waits {
			dest = append(dest, &r.Waits[i])
		}
		if err := rows.Scan(append(dest, &r.WaitMaxMicros, &r.Depth)...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
