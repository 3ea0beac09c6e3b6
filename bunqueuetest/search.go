package bunqueuetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// listed is how many jobs, or kinds, a failure message lists.
const listed = 10

// jobRow is a pending job as jobsql.ListPending reads it.
type jobRow struct {
	ID          int64
	Queue       string
	Kind        string
	Args        []byte
	Metadata    []byte
	Priority    int
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	UniqueKey   *string
	LeaseToken  *string
}

// candidate is a pending job of the kind looked for: the job, its args as
// stored, and how it differs from what was looked for (nothing: it
// matches).
type candidate[T bunqueue.JobArgs] struct {
	job   *EnqueuedJob[T]
	args  []byte
	diffs []string
}

// searched is what search found: the pending jobs of the kind that
// match, and the others.
type searched[T bunqueue.JobArgs] struct {
	kind    string
	sql     jobsql.SQL
	matched []candidate[T]
	others  []candidate[T]
}

// search reads the pending jobs of want's kind through db and sorts them
// into those that match want and opts and the others.
func search[T bunqueue.JobArgs](ctx context.Context, db bun.IDB, want T, opts *RequireEnqueuedOpts) (searched[T], error) {
	s := searched[T]{kind: want.Kind()}
	if err := opts.check(); err != nil {
		return s, err
	}
	d, err := sqldialect.For(db)
	if err != nil {
		return s, err
	}
	var t bunqueue.Tables
	if opts != nil {
		t = opts.Tables
	}
	names, err := tables.New("RequireEnqueuedOpts.Tables", t.Prefix, t.Schema)
	if err != nil {
		return s, err
	}
	s.sql = jobsql.New(d, names)
	var rows []jobRow
	if err := s.sql.ListPending(ctx, db, &rows, s.kind); err != nil {
		return s, fmt.Errorf("read the pending jobs of kind %q (were the jobs tables made with bunqueue.Migrate?): %w", s.kind, err)
	}
	if opts == nil {
		opts = &RequireEnqueuedOpts{}
	}
	for i := range rows {
		c := newCandidate[T](&rows[i])
		c.diffs = append(c.diffs, opts.diffs(c.job.fields())...)
		c.diffs = append(c.diffs, argsDiffs(want, c.job.Args)...)
		if c.diffs == nil {
			s.matched = append(s.matched, c)
		} else {
			s.others = append(s.others, c)
		}
	}
	// The closest first: the failure message lists the first few.
	slices.SortStableFunc(s.others, func(a, b candidate[T]) int { return len(a.diffs) - len(b.diffs) })
	return s, nil
}

// newCandidate decodes a row; args or metadata that do not decode are
// its differences.
func newCandidate[T bunqueue.JobArgs](r *jobRow) candidate[T] {
	c := candidate[T]{args: r.Args, job: &EnqueuedJob[T]{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Priority: r.Priority, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		RunAt: r.RunAt.UTC(), CreatedAt: r.CreatedAt.UTC(),
	}}
	if r.UniqueKey != nil {
		c.job.UniqueKey = *r.UniqueKey
	}
	if err := json.Unmarshal(r.Args, &c.job.Args); err != nil {
		c.diffs = append(c.diffs, fmt.Sprintf("its args do not decode into %T: %v", c.job.Args, err))
	}
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &c.job.Metadata); err != nil {
			c.diffs = append(c.diffs, fmt.Sprintf("its metadata do not decode: %v", err))
		}
	}
	return c
}

// check returns what makes o unfit to match jobs with, naming the field.
func (o *RequireEnqueuedOpts) check() error {
	switch {
	case o == nil:
		return nil
	case o.RunAtWithin < 0:
		return fmt.Errorf("RequireEnqueuedOpts.RunAtWithin must not be negative, got %s", o.RunAtWithin)
	case o.RunAtWithin > 0 && o.RunAt.IsZero():
		return errors.New("RequireEnqueuedOpts.RunAtWithin is set without RunAt")
	}
	return nil
}

// diffs says how a job, f, differs from o; nil if it matches.
func (o *RequireEnqueuedOpts) diffs(f jobFields) []string {
	var d []string
	if o.Queue != "" && f.queue != o.Queue {
		d = append(d, fmt.Sprintf("Queue is %q, want %q", f.queue, o.Queue))
	}
	if o.Priority != nil && f.priority != *o.Priority {
		d = append(d, fmt.Sprintf("Priority is %d, want %d", f.priority, *o.Priority))
	}
	if o.MaxAttempts != 0 && f.maxAttempts != o.MaxAttempts {
		d = append(d, fmt.Sprintf("MaxAttempts is %d, want %d", f.maxAttempts, o.MaxAttempts))
	}
	if o.UniqueKey != "" && f.uniqueKey != o.UniqueKey {
		d = append(d, fmt.Sprintf("UniqueKey is %q, want %q", f.uniqueKey, o.UniqueKey))
	}
	for _, k := range sortedKeys(o.Metadata) {
		got, ok := f.metadata[k]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("Metadata[%q] is missing, want %q", k, o.Metadata[k]))
		case got != o.Metadata[k]:
			d = append(d, fmt.Sprintf("Metadata[%q] is %q, want %q", k, got, o.Metadata[k]))
		}
	}
	if !o.RunAt.IsZero() {
		want := o.RunAt.Truncate(time.Microsecond) // as the jobs table keeps it
		if off := f.runAt.Sub(want); off > o.RunAtWithin || off < -o.RunAtWithin {
			d = append(d, fmt.Sprintf("RunAt is %s, want %s (%s off, RunAtWithin is %s)", stamp(f.runAt), stamp(want), off, o.RunAtWithin))
		}
	}
	return d
}

// jobFields are the fields of an EnqueuedJob that do not depend on its
// args' type.
type jobFields struct {
	queue       string
	priority    int
	maxAttempts int
	uniqueKey   string
	metadata    map[string]string
	runAt       time.Time
}

func (j *EnqueuedJob[T]) fields() jobFields {
	return jobFields{queue: j.Queue, priority: j.Priority, maxAttempts: j.MaxAttempts, uniqueKey: j.UniqueKey, metadata: j.Metadata, runAt: j.RunAt}
}

// list describes the jobs of cs, one a line (at most listed of them),
// each with how it differs, if it does.
func (s searched[T]) list(cs []candidate[T]) string {
	var b strings.Builder
	for i, c := range cs {
		if i == listed {
			fmt.Fprintf(&b, "\t... and %d more\n", len(cs)-listed)
			break
		}
		j := c.job
		fmt.Fprintf(&b, "\tjob %d (queue %q, priority %d, attempts %d of %d, due %s", j.ID, j.Queue, j.Priority, j.Attempts, j.MaxAttempts, stamp(j.RunAt))
		if j.UniqueKey != "" {
			fmt.Fprintf(&b, ", unique key %q", j.UniqueKey)
		}
		if len(j.Metadata) > 0 {
			meta, _ := json.Marshal(j.Metadata)
			fmt.Fprintf(&b, ", metadata %s", meta)
		}
		fmt.Fprintf(&b, ", args %s)\n", c.args)
		if len(c.diffs) > 0 {
			fmt.Fprintf(&b, "\t\t%s\n", strings.Join(c.diffs, "; "))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// kinds says which kinds of job are pending, for a failure that found
// none of the kind looked for.
func (s searched[T]) kinds(ctx context.Context, db bun.IDB) string {
	kinds, err := s.sql.PendingKinds(ctx, db, listed+1)
	switch {
	case err != nil:
		return fmt.Sprintf("reading the kinds that are pending failed: %v", err)
	case len(kinds) == 0:
		return "no job of any kind is pending"
	}
	parts := make([]string, 0, len(kinds))
	for i, k := range kinds {
		if i == listed {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%q (%d)", k.Kind, k.Total))
	}
	return "pending jobs by kind: " + strings.Join(parts, ", ")
}

// stamp formats a time as a failure message shows it.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.999999 MST") }

// jobsMatch is "1 pending job of kind k matches" or "n pending jobs of
// kind k match".
// othersDiffer says that the n pending jobs of the kind that a check
// lists instead differ from what it wants.
func othersDiffer(n int) string {
	if n == 1 {
		return "the one pending job of the kind differs"
	}
	return fmt.Sprintf("the %d pending jobs of the kind differ, the closest first", n)
}

func jobsMatch(n int, kind string) string {
	if n == 1 {
		return fmt.Sprintf("1 pending job of kind %q matches", kind)
	}
	return fmt.Sprintf("%d pending jobs of kind %q match", n, kind)
}
