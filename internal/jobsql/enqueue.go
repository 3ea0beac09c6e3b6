package jobsql

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// NewJob is a row to insert into the jobs table, its values checked: the
// server may store a value it cannot hold as another, with a warning,
// rather than refuse it.
type NewJob struct {
	// Queue is the jobs queue and Kind the kind of job, which names its
	// worker.
	Queue string
	Kind  string
	// Args and Metadata are the JSON of the job's arguments and of its
	// metadata (nil for none), stored byte for byte.
	Args     []byte
	Metadata []byte
	// Priority orders the jobs of a queue: lower runs first.
	Priority int
	// MaxAttempts is how many attempts the job gets.
	MaxAttempts int
	// RunAt is when the job is due; zero means Delay (zero or more) from
	// now, by the database clock.
	RunAt time.Time
	Delay time.Duration
	// CreatedAt is when the job was first enqueued; zero means now, by the
	// database clock.
	CreatedAt time.Time
	// UniqueKey, when not nil, makes the job unique while it is pending.
	UniqueKey *string
	// LimitKey, when not nil, is the job's key for its queue's KeyLimit.
	LimitKey *string
	// TraceContext is the carrier of the span that enqueued the job.
	TraceContext []byte
}

// Values renders j as a VALUES tuple of the INSERT of InsertOne and
// InsertMany, formatted by gen (bun writes bytes as hex literals: two
// bytes of SQL for each byte of payload).
func (s SQL) Values(gen schema.QueryGen, j NewJob) string {
	runAt := s.d.Now()
	if j.Delay > 0 {
		runAt = s.d.NowPlus(j.Delay)
	}
	if !j.RunAt.IsZero() {
		runAt = s.d.Time(j.RunAt)
	}
	createdAt := s.d.Now()
	if !j.CreatedAt.IsZero() {
		createdAt = s.d.Time(j.CreatedAt)
	}
	return gen.FormatQuery("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		j.Queue, j.Kind, j.Args, j.Metadata, j.Priority, j.MaxAttempts, bun.Safe(runAt), bun.Safe(createdAt), j.UniqueKey, j.LimitKey, j.TraceContext)
}

// insertColumns are the columns that Values renders, in its order.
const insertColumns = "(queue, kind, args, metadata, priority, max_attempts, run_at, created_at, unique_key, limit_key, trace_context)"

// insert is the INSERT of the jobs of values, one or more Values tuples.
// A job whose unique key a pending job holds is skipped where the server
// can skip it (Dialect.SkipTakenKeys), or fails the statement where it
// cannot (Dialect.KeyTaken).
func (s SQL) insert(values string) string {
	return "INSERT INTO " + s.t.Jobs + " " + insertColumns + " VALUES " + values + s.d.SkipTakenKeys()
}

// InsertLen is the length of the INSERT of InsertMany without its rows,
// for sizing batches to the server's largest statement.
func (s SQL) InsertLen() int { return len(s.insert("")) }

// InsertOne inserts one job, its Values tuple, and returns its id;
// inserted is false, and err nil, when a pending job holds its unique
// key.
func (s SQL) InsertOne(ctx context.Context, db bun.IDB, values string) (id int64, inserted bool, err error) {
	id, inserted, err = s.d.InsertID(ctx, db, s.insert(values))
	if s.d.KeyTaken(err, s.t.Index(migrate.UniqueKeyIndex)) {
		return 0, false, nil
	}
	return id, inserted, err
}

// InsertMany inserts the jobs of rows, Values tuples, with one statement
// and returns how many it inserted, skipping those whose unique key a
// pending job holds. Where the server cannot skip them (MySQL), taken
// reports that the statement failed whole for one of them: nothing was
// inserted, and the statement's transaction goes on.
func (s SQL) InsertMany(ctx context.Context, db bun.IDB, rows []string) (n int64, taken bool, err error) {
	n, err = s.d.InsertCount(ctx, db, s.insert(strings.Join(rows, ",\n")))
	if s.d.KeyTaken(err, s.t.Index(migrate.UniqueKeyIndex)) {
		return 0, true, nil
	}
	return n, false, err
}

// PendingID returns the id of the pending job that holds the unique key;
// ok is false if none does. It reads the unique index only, so it does
// not wait for the row lock of a job that is running, with a shared lock
// on the index entry (Dialect.ShareLock), which sees the latest committed
// row whatever the transaction's snapshot.
func (s SQL) PendingID(ctx context.Context, db bun.IDB, key string) (id int64, ok bool, err error) {
	var ids []int64
	if err := scan(ctx, db, &ids, "SELECT id FROM "+s.t.Jobs+" WHERE unique_key = ? "+s.d.ShareLock(), key); err != nil {
		return 0, false, err
	}
	if len(ids) != 1 {
		return 0, false, nil
	}
	return ids[0], true, nil
}

// PendingKeys returns which of keys pending jobs hold, read as PendingID
// reads one.
func (s SQL) PendingKeys(ctx context.Context, db bun.IDB, keys []string) ([]string, error) {
	var held []string
	err := scan(ctx, db, &held, "SELECT unique_key FROM "+s.t.Jobs+" WHERE unique_key IN (?) "+s.d.ShareLock(), bun.List(keys))
	return held, err
}
