package histsql

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/uptrace/bun"
)

// Counts are one queue's counts to add to a history row: what a process
// did since its last flush, or a row read back.
type Counts struct {
	Processed, Failed, Started int64
	// Waits counts the waits before start of the started jobs, by
	// bucket (WaitBucket), and WaitMaxMicros is the longest.
	Waits         [WaitBuckets]int64
	WaitMaxMicros int64
}

// Empty reports whether c counts nothing.
func (c *Counts) Empty() bool { return c.Processed == 0 && c.Failed == 0 && c.Started == 0 }

// Merge adds o to c.
func (c *Counts) Merge(o *Counts) {
	c.Processed += o.Processed
	c.Failed += o.Failed
	c.Started += o.Started
	for i := range c.Waits {
		c.Waits[i] += o.Waits[i]
	}
	c.WaitMaxMicros = max(c.WaitMaxMicros, o.WaitMaxMicros)
}

// args appends c's values in countCols' order, then the longest wait.
func (c *Counts) args(out []any) []any {
	out = append(out, c.Processed, c.Failed, c.Started)
	for _, w := range c.Waits {
		out = append(out, w)
	}
	return append(out, c.WaitMaxMicros)
}

// Add adds counts, by queue, to the rows of the database clock's current
// minute, in one statement: a row is created, or its counts added to.
func (s SQL) Add(ctx context.Context, db bun.IDB, counts map[string]*Counts) error {
	if len(counts) == 0 {
		return nil
	}
	marks := strings.Repeat("?, ", len(countCols())) + "?" // the counts, then the longest wait
	row := "(?, " + itoa(Minute) + ", " + s.bucketNow(Minute) + ", " + marks + ", -1)"
	var values []string
	var args []any
	for _, q := range slices.Sorted(maps.Keys(counts)) { // one order of the rows' locks in every process
		values = append(values, row)
		args = counts[q].args(append(args, q))
	}
	_, err := db.NewRaw(s.into()+" VALUES "+strings.Join(values, ", ")+s.upsert(), args...).Exec(ctx)
	return err
}

// Depth sets, by queue, the depth sampled now into the rows of the
// database clock's current minute, keeping the larger of two samples.
func (s SQL) Depth(ctx context.Context, db bun.IDB, depths map[string]int) error {
	if len(depths) == 0 {
		return nil
	}
	zeros := strings.Repeat("0, ", len(countCols())+1)
	row := "(?, " + itoa(Minute) + ", " + s.bucketNow(Minute) + ", " + zeros + "?)"
	var values []string
	var args []any
	for _, q := range slices.Sorted(maps.Keys(depths)) {
		values = append(values, row)
		args = append(args, q, depths[q])
	}
	_, err := db.NewRaw(s.into()+" VALUES "+strings.Join(values, ", ")+s.upsert(), args...).Exec(ctx)
	return err
}
