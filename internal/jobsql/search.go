package jobsql

import (
	"context"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
)

// Sources are the reads of a job listing: the jobs table's Waiting,
// Completed and Blocked jobs, and the failed jobs.
type Sources struct{ Waiting, Completed, Blocked, Failed bool }

// ScanRange is the part of a listing that one page of a search looks
// through: the newest Rows jobs of the sources below the filter's
// BeforeID that their indexes yield (see searchRangeQuery), down to Low.
type ScanRange struct {
	// Low is the lowest id (a failed job's job_id) of the range; 0 when
	// there is none.
	Low int64 `bun:"low"`
	// Rows is how many jobs the range holds: the limit given, unless
	// fewer are left below BeforeID, and then the range goes to the end.
	Rows int `bun:"n"`
}

// SearchRange returns the range of the newest jobs, at most limit, that
// the index of each of src's reads yields for f: a statement that walks,
// in each source, the index that ListJobs and ListFailedJobs walk,
// reading its entries alone, and keeps the newest limit of them all. A
// page of a search then lists the matches at or above Low
// (ListFilter.FromID), examining those rows and no others, however rare
// the matches are.
func (s SQL) SearchRange(ctx context.Context, db bun.IDB, src Sources, f ListFilter, limit int) (ScanRange, error) {
	var r ScanRange
	q, args := s.searchRangeQuery(src, f, limit)
	err := db.NewRaw(q, args...).Scan(ctx, &r)
	return r, err
}

// searchRangeQuery is SearchRange's statement and its arguments. Its
// reads keep of f what their index has: the state, the queue or else the
// kind, and the id below BeforeID; so that they read index entries alone,
// and a page's range is of a bounded length of the index whatever the
// other filters skip.
func (s SQL) searchRangeQuery(src Sources, f ListFilter, limit int) (string, []any) {
	f = ListFilter{Queue: f.Queue, Kind: f.Kind, BeforeID: f.BeforeID, Limit: limit}
	if f.Queue != "" {
		f.Kind = ""
	}
	var reads []Listing
	if src.Waiting {
		reads = append(reads, s.jobsRead(Waiting, f, "id"))
	}
	if src.Completed {
		reads = append(reads, s.jobsRead(Completed, f, "id"))
	}
	if src.Blocked {
		reads = append(reads, s.jobsRead(Blocked, f, "id"))
	}
	if src.Failed {
		reads = append(reads, s.failedRead(f, "job_id AS id"))
	}
	parts := make([]string, len(reads))
	var args []any
	for i, r := range reads {
		parts[i] = "SELECT id FROM (" + r.Query + ") AS r" + strconv.Itoa(i)
		args = append(args, r.Args...)
	}
	return "SELECT COALESCE(MIN(id), 0) AS low, COUNT(*) AS n FROM (" + strings.Join(parts, " UNION ALL ") +
		" ORDER BY id DESC LIMIT " + strconv.Itoa(limit) + ") AS scanned", args
}
