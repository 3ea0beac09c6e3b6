package histsql

import (
	"context"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
)

func itoa(n int) string { return strconv.Itoa(n) }

// Now returns the database clock in Unix seconds.
func (s SQL) Now(ctx context.Context, db bun.IDB) (int64, error) {
	var now int64
	err := db.NewRaw("SELECT "+s.nowSeconds()).Scan(ctx, &now)
	return now, err
}

// Roll moves the minute rows of buckets before before (Unix seconds)
// into the quarter-hour rows that hold them, summed, in tx: it adds their
// counts to the quarter's row, then deletes them, so that the totals stay
// what they were. Processes add only to the current minute, after
// before, so no row appears between the two statements.
func (s SQL) Roll(ctx context.Context, tx bun.IDB, before int64) error {
	sums := make([]string, 0, len(countCols())+len(maxCols))
	for _, c := range countCols() {
		sums = append(sums, "SUM("+c+")")
	}
	for _, c := range maxCols {
		sums = append(sums, "MAX("+c+")")
	}
	quarter := "bucket - bucket % " + itoa(Quarter)
	_, err := tx.NewRaw(s.into()+" SELECT queue, "+itoa(Quarter)+", "+quarter+", "+strings.Join(sums, ", ")+
		" FROM "+s.t.History+" WHERE res = "+itoa(Minute)+" AND bucket < ? GROUP BY queue, "+quarter+s.upsert(), before).Exec(ctx)
	if err != nil {
		return err
	}
	_, err = tx.NewRaw("DELETE FROM "+s.t.History+" WHERE res = "+itoa(Minute)+" AND bucket < ?", before).Exec(ctx)
	return err
}

// Purge deletes the quarter-hour rows of buckets before before (Unix
// seconds).
func (s SQL) Purge(ctx context.Context, db bun.IDB, before int64) error {
	_, err := db.NewRaw("DELETE FROM "+s.t.History+" WHERE res = "+itoa(Quarter)+" AND bucket < ?", before).Exec(ctx)
	return err
}
