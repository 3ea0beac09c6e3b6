package bunqueue

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// ErrInvalidFilter is wrapped by the errors of JobList for a
// JobListFilter field out of range; the message names the field.
var ErrInvalidFilter = errors.New("bunqueue: invalid job filter")

// JobListFilter selects jobs for JobList, newest first (by id). Its zero
// value lists the 100 newest jobs of every queue, kind and state.
type JobListFilter struct {
	// Queue and Kind, when set, keep only the jobs of that queue and
	// kind.
	Queue string
	Kind  string
	// States, when set, keeps only the jobs in one of these states.
	States []JobState
	// CreatedFrom and CreatedBefore, when set, keep only the jobs created
	// at or after CreatedFrom and before CreatedBefore.
	CreatedFrom   time.Time
	CreatedBefore time.Time
	// Search, when set, keeps only the jobs whose args or error (the
	// jobs table's last error, a failed job's error) contain it, as
	// written: % and _ are no wildcards. ASCII letters match either case
	// on every server; further, MySQL and MariaDB fold every letter of
	// args and error (LOWER of utf8mb4, compared code point by code
	// point, so that "e" does not find "é"), PostgreSQL every letter of
	// the error that the database's LC_CTYPE folds and ASCII letters
	// alone in args (and args with a NUL byte, not JSON, not at all),
	// SQLite ASCII letters alone. Args are searched as they are stored,
	// the JSON that encoding/json wrote ({"a":1}, no spaces, non-ASCII
	// as UTF-8, and <, >, & as \u003c, \u003e, \u0026). At most
	// JobListSearchMaxBytes bytes of UTF-8, no NUL.
	//
	// No index serves a search, so a page looks through a bounded range:
	// the JobListSearchRows newest jobs below the Cursor that the
	// listing's indexes yield for the states and the queue (or else the
	// kind), and lists the matches among them that the other filters
	// keep. A page of a search may therefore hold fewer than Limit jobs,
	// or none, and still have a Cursor: the next page searches older
	// ones.
	Search string
	// Cursor, when set, is JobListPage.Cursor of the page before: the list
	// goes on after that page's last job (with a Search, the last one it
	// looked through). Give it with the same filter.
	Cursor string
	// Limit is the most jobs of a page, 1 to 1000. Defaults to 100.
	Limit int
}

// JobListPage is a page of JobList.
type JobListPage struct {
	// Jobs are the page's jobs, newest first.
	Jobs []JobRecord
	// Cursor is JobListFilter.Cursor for the next page; empty after the
	// last page. With a Search it goes on after the last job the page
	// looked through, which may be older than its last job.
	Cursor string
	// Searched is, for a Search, how many jobs the page's range held
	// (JobListFilter.Search): JobListSearchRows, unless fewer were left.
	// A page that filled up with matches stopped before the range's end.
	Searched int
}

// The bounds of JobListFilter.Search.
const (
	// JobListSearchMaxBytes is the longest Search, in bytes.
	JobListSearchMaxBytes = 200
	// JobListSearchRows is the most jobs one page of a Search looks
	// through.
	JobListSearchRows = 10_000
)

// JobList lists the jobs that filter selects, newest first, a page at a
// time: from the jobs table (pending, scheduled, running, retrying,
// blocked jobs of workflows, and completed while their queue keeps them)
// and from the failed jobs
// (failed and cancelled, by their job id). Each page is read with a
// keyset on the id, through indexes whose columns are the state, the
// queue or kind when the filter has one, and the id (schema version 4):
// a page costs the same on a million jobs as on a hundred. The time
// range, a kind with a queue, and the waiting states (pending, scheduled,
// running, retrying, all in the jobs table's waiting state) filter the
// rows those indexes yield, so a page of rare ones among many reads
// more. A Search reads, per page, a range of at most JobListSearchRows
// jobs along those indexes, and the matches within it (see
// JobListFilter.Search). A listing is not a snapshot: a job that moves
// between tables while the pages are read (it fails, or is cancelled)
// may be listed twice or missed; JobListTx in a REPEATABLE READ
// transaction reads one snapshot on MySQL and PostgreSQL.
func (c *Client) JobList(ctx context.Context, filter JobListFilter) (JobListPage, error) {
	return c.JobListTx(ctx, c.db, filter)
}

// JobListTx is JobList through db, a transaction or a connection of the
// app's.
func (c *Client) JobListTx(ctx context.Context, db bun.IDB, filter JobListFilter) (JobListPage, error) {
	q, err := filter.query()
	if err != nil {
		return JobListPage{}, err
	}
	recs, err := c.listJobs(ctx, db, &q)
	if err != nil {
		return JobListPage{}, fmt.Errorf("bunqueue: list jobs: %w", c.notMigrated(err))
	}
	page := JobListPage{Jobs: recs, Searched: q.searched}
	switch {
	case len(recs) > q.list.Limit-1: // each source read one more than the page
		page.Jobs = recs[:q.list.Limit-1]
		page.Cursor = encodeCursor(page.Jobs[len(page.Jobs)-1].ID)
	case q.list.FromID > 0: // a search's range ended before the jobs did
		page.Cursor = encodeCursor(q.list.FromID)
	}
	return page, nil
}

// jobListQuery is a checked JobListFilter: which tables and states to
// read, and the filter of each read.
type jobListQuery struct {
	list                       jobsql.ListFilter // its Limit is the page's and one more
	waiting, complete, blocked bool              // read the jobs table's waiting, completed, blocked jobs
	failed                     bool              // read the failed jobs
	searched                   int               // the jobs of a search's range (JobListPage.Searched)
}

// query checks f and returns what JobList reads, or an error that names
// the field and wraps ErrInvalidFilter.
func (f JobListFilter) query() (jobListQuery, error) {
	bad := func(format string, a ...any) (jobListQuery, error) {
		return jobListQuery{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidFilter}, a...)...)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > 1000 {
		return bad("JobListFilter.Limit must be within 1..1000, got %d", f.Limit)
	}
	for field, s := range map[string]string{"JobListFilter.Queue": f.Queue, "JobListFilter.Kind": f.Kind} {
		if err := checkText(field, s); err != nil {
			return bad("%w", err)
		}
	}
	for field, t := range map[string]time.Time{"JobListFilter.CreatedFrom": f.CreatedFrom, "JobListFilter.CreatedBefore": f.CreatedBefore} {
		if !t.IsZero() && (t.UTC().Year() < 1000 || t.UTC().Year() > 9999) {
			return bad("%s must be within years 1000 and 9999 (in UTC), got %s", field, t.UTC().Format(time.RFC3339Nano))
		}
	}
	if !f.CreatedFrom.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedBefore.After(f.CreatedFrom) {
		return bad("JobListFilter.CreatedBefore (%s) must be after CreatedFrom (%s)",
			f.CreatedBefore.UTC().Format(time.RFC3339Nano), f.CreatedFrom.UTC().Format(time.RFC3339Nano))
	}
	if err := checkSearch(f.Search); err != nil {
		return bad("%w", err)
	}
	q := jobListQuery{list: jobsql.ListFilter{Queue: f.Queue, Kind: f.Kind, CreatedFrom: f.CreatedFrom, CreatedBefore: f.CreatedBefore,
		Search: f.Search, Limit: f.Limit + 1}}
	if f.Cursor != "" {
		id, err := decodeCursor(f.Cursor)
		if err != nil {
			return bad("JobListFilter.Cursor %q is not a cursor of JobList: %w", f.Cursor, err)
		}
		q.list.BeforeID = id
	}
	return q, q.states(f.States)
}

// checkSearch returns what makes s unfit for JobListFilter.Search.
func checkSearch(s string) error {
	if len(s) > JobListSearchMaxBytes {
		return fmt.Errorf("JobListFilter.Search must be at most %d bytes, got %d", JobListSearchMaxBytes, len(s))
	}
	return checkText("JobListFilter.Search", s)
}

// waitingStates are the JobStates of the jobs table's waiting state.
var waitingStates = map[JobState]jobsql.WaitingState{
	JobStatePending: jobsql.Pending, JobStateScheduled: jobsql.Scheduled, JobStateRetrying: jobsql.Retrying, JobStateRunning: jobsql.Running,
}

// states sets which tables and states q reads, from JobListFilter.States.
func (q *jobListQuery) states(states []JobState) error {
	if len(states) == 0 {
		q.waiting, q.complete, q.blocked, q.failed = true, true, true, true
		return nil
	}
	for i, s := range states {
		w, waiting := waitingStates[s]
		switch {
		case waiting:
			q.waiting = true
			if !slices.Contains(q.list.Waiting, w) {
				q.list.Waiting = append(q.list.Waiting, w)
			}
		case s == JobStateCompleted:
			q.complete = true
		case s == JobStateBlocked:
			q.blocked = true
		case s == JobStateFailed:
			q.failed = true
		default:
			return fmt.Errorf("%w: JobListFilter.States[%d] is %q, not one of %s", ErrInvalidFilter, i, s, joinStates())
		}
	}
	if len(q.list.Waiting) == len(waitingStates) {
		q.list.Waiting = nil // all of them: no condition
	}
	return nil
}

func joinStates() string {
	names := make([]string, len(jobStates))
	for i, s := range jobStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// listJobs reads up to the query's Limit jobs from each table and state
// it names, and merges them, newest first: at most Limit of them. For a
// search, it reads those of the search's range alone.
func (c *Client) listJobs(ctx context.Context, db bun.IDB, q *jobListQuery) ([]JobRecord, error) {
	if found, err := c.searchRange(ctx, db, q); err != nil || !found {
		return nil, err
	}
	jobs := c.jobSQL()
	var recs []JobRecord
	for _, read := range []struct {
		ok    bool
		state int
	}{{q.waiting, jobsql.Waiting}, {q.complete, jobsql.Completed}, {q.blocked, jobsql.Blocked}} {
		if !read.ok {
			continue
		}
		var rows []controlRow
		if err := jobs.ListJobs(ctx, db, read.state, q.list, &rows); err != nil {
			return nil, err
		}
		for i := range rows {
			rec, err := rows[i].record()
			if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
	}
	if q.failed {
		var failed []FailedJob
		if err := jobs.ListFailedJobs(ctx, db, q.list, &failed); err != nil {
			return nil, err
		}
		for i := range failed {
			rec, err := failedRecord(&failed[i])
			if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
	}
	slices.SortStableFunc(recs, func(a, b JobRecord) int { return cmp.Compare(b.ID, a.ID) })
	return recs[:min(len(recs), q.list.Limit)], nil
}

// searchRange narrows q, for a Search, to the range of jobs that one page
// looks through (q.list.FromID, when the range ends before the jobs do),
// and reports whether the range holds any; without a Search, true.
func (c *Client) searchRange(ctx context.Context, db bun.IDB, q *jobListQuery) (bool, error) {
	if q.list.Search == "" {
		return true, nil
	}
	src := jobsql.Sources{Waiting: q.waiting, Completed: q.complete, Blocked: q.blocked, Failed: q.failed}
	r, err := c.jobSQL().SearchRange(ctx, db, src, q.list, JobListSearchRows)
	if err != nil {
		return false, err
	}
	q.searched = r.Rows
	if r.Rows == JobListSearchRows {
		q.list.FromID = r.Low
	}
	return r.Rows > 0, nil
}

// cursorPrefix marks the cursors of this version of JobList. A cursor is
// an id that the next page's jobs are below: the page's last job, or the
// last one that a search's range held.
const cursorPrefix = "j1:"

// encodeCursor returns the cursor of the page after the job id.
func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(id, 10)))
}

// decodeCursor returns the id of a cursor of encodeCursor.
func decodeCursor(cursor string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutPrefix(string(b), cursorPrefix)
	id, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || id <= 0 {
		return 0, errors.New("unknown form")
	}
	return id, nil
}
