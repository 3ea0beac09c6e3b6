package bunqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// EnqueueOpts are the options of one job. A nil *EnqueueOpts, and zero
// fields, mean defaults. A field out of the range given here is refused
// with an error that names it and wraps ErrInvalidJob: nothing is
// clamped or replaced. Queue and UniqueKey must be valid UTF-8 without
// NUL bytes (which the servers' text columns cannot hold as they are),
// and are compared byte for byte: "Key", "key" and "key " are three keys,
// or three queues.
type EnqueueOpts struct {
	// Queue is the jobs queue, one of Config.JobQueues. Defaults to
	// QueueDefault.
	Queue string
	// Priority orders the jobs of a queue: lower runs first, then earlier
	// RunAt, then enqueue order. Defaults to 0; -32768 to 32767.
	Priority int
	// RunAt schedules the job for a time, stored in UTC to the
	// microsecond: from year 1000 to 9999, in UTC. Zero means now, by the
	// database clock.
	RunAt time.Time
	// Delay schedules the job this long after now, by the database clock.
	// Set RunAt or Delay, not both.
	Delay time.Duration
	// MaxAttempts is how many attempts the job gets before it moves to the
	// failed-jobs table: at most 2147483647. Defaults to
	// MaxAttemptsDefault.
	MaxAttempts int
	// UniqueKey, if set, makes the job unique while it is pending: as long
	// as a job with this key waits or runs, enqueueing another with the
	// same key returns the existing job (EnqueueResult.Duplicate) and
	// inserts nothing. The key is released when the job completes or
	// fails for good. At most 255 bytes.
	UniqueKey string
	// LimitKey is the job's key for its queue's JobQueueConfig.KeyLimit:
	// at most KeyLimit jobs with the same LimitKey run at once. Empty
	// means none: the job is not limited. At most 255 bytes, UTF-8
	// without NUL.
	LimitKey string
	// Metadata is stored with the job, as JSON, and given to its worker in
	// Job.Metadata. Its keys and values must be valid UTF-8 (NUL bytes
	// are kept).
	Metadata map[string]string
	// Sequence, if set, puts the job in the sequence of that key: the
	// jobs of a key run one at a time, in enqueue order, across every
	// process and queue. A job whose predecessor has not completed is
	// blocked (JobStateBlocked) until it has; see SequencePolicy for a
	// predecessor that fails for good or is cancelled. Only Enqueue takes
	// it (not EnqueueMany or EnqueueWorkflow), and not with UniqueKey. At
	// most 255 bytes, UTF-8 without NUL. See docs/workflows.md.
	Sequence string
	// SequencePolicy is what the job does when its predecessor in its
	// sequence fails for good or is cancelled: DependencyHold (the
	// default) waits until that job is retried (RetryFailed; then for its
	// new run) or deleted (JobDelete, DeleteFailed); DependencyIgnore
	// runs after it all the same. A deleted predecessor never holds.
	SequencePolicy DependencyPolicy
}

// ErrInvalidJob is wrapped by the errors of Enqueue, EnqueueMany and
// AddWorker for a job that cannot be stored as it is: nil args, args that
// cannot be encoded or do not fit the server, a Kind or an EnqueueOpts
// field out of what the jobs tables hold. The message names the field.
// Nothing was inserted, and the same job would be refused again.
var ErrInvalidJob = errors.New("bunqueue: invalid job")

// invalidJob is an error that is ErrInvalidJob, with its own message.
type invalidJob struct{ error }

func (e invalidJob) Unwrap() error      { return e.error }
func (invalidJob) Is(target error) bool { return target == ErrInvalidJob }

// EnqueueResult is what Enqueue did.
type EnqueueResult struct {
	// ID is the job's id: the new job's, or the pending job's that has the
	// same UniqueKey.
	ID int64
	// Duplicate is true when a pending job with the same UniqueKey
	// existed and nothing was inserted.
	Duplicate bool
}

// EnqueueParams is one job for EnqueueMany.
type EnqueueParams struct {
	Args JobArgs
	Opts *EnqueueOpts
}

// Enqueue adds a job to the jobs table through db: pass the bun.Tx of the
// business write that causes the job, and the job exists if and only if
// that transaction commits. A *bun.DB inserts it at once. Args are stored
// as JSON; args that cannot be encoded, an unknown queue, bad options or a
// payload larger than the server's max_allowed_packet are an error, and
// nothing is inserted.
func (c *Client) Enqueue(ctx context.Context, db bun.IDB, args JobArgs, opts *EnqueueOpts) (res EnqueueResult, err error) {
	params := []EnqueueParams{{Args: args, Opts: opts}}
	ctx, span := c.startSend(ctx, db, params)
	defer func() {
		if err == nil {
			span.SetAttributes(semconv.MessagingMessageID(strconv.FormatInt(res.ID, 10)))
		}
		c.endSend(ctx, span, params, res.Duplicate, err)
	}()
	row, err := c.jobValues(ctx, db, params[0], c.tel.Inject(ctx))
	if err != nil {
		return EnqueueResult{}, err
	}
	var key *string
	if opts != nil && opts.UniqueKey != "" {
		key = &opts.UniqueKey
	}
	hand := c.handOverFeed(db, params[0])
	if hand != nil {
		ctx = context.WithValue(ctx, handOverKey{}, hand) // see handover.go
	}
	err = c.retryOutsideTx(ctx, db, func() (err error) {
		if opts != nil && opts.Sequence != "" {
			res, err = c.insertSequenced(ctx, db, row, opts)
			return err
		}
		res, err = c.insertJob(ctx, db, row, key)
		return err
	})
	if err != nil {
		return EnqueueResult{}, errorf("bunqueue: enqueue %s: %w", args.Kind(), c.notMigrated(err))
	}
	if err := c.notifyEnqueued(ctx, db, params, res.Duplicate); err != nil { // PostgreSQL: wake other processes
		return EnqueueResult{}, err
	}
	handOverJob(hand, params[0], res)
	return res, nil
}

// insertJob inserts one job, rendered as a VALUES tuple. A job whose
// unique key is pending is not inserted (the duplicate check reads the
// unique index only, so it does not wait for the row lock of a job that
// is running); the pending job's id is read instead, with a shared lock
// on the unique index entry, which sees the latest committed row whatever
// the transaction's snapshot.
func (c *Client) insertJob(ctx context.Context, db bun.IDB, values string, uniqueKey *string) (EnqueueResult, error) {
	jobs := c.jobSQL()
	for range 3 {
		id, inserted, err := jobs.InsertOne(ctx, db, values)
		if err != nil || inserted {
			return EnqueueResult{ID: id}, err
		}
		if uniqueKey == nil {
			return EnqueueResult{}, errors.New("the job was not inserted")
		}
		id, pending, err := jobs.PendingID(ctx, db, *uniqueKey)
		if err != nil {
			return EnqueueResult{}, err
		}
		if pending {
			return EnqueueResult{ID: id, Duplicate: true}, nil
		}
		// The pending job finished in between: insert again.
	}
	return EnqueueResult{}, fmt.Errorf("the job with unique key %q kept finishing while it was enqueued again", *uniqueKey)
}

// EnqueueMany adds jobs like Enqueue, with multi-row INSERTs (as few as
// max_allowed_packet allows), and returns how many were inserted: jobs
// whose UniqueKey is pending, or taken by an earlier job of the call, are
// skipped. If any job is invalid, nothing is inserted. Through a *bun.DB
// the statements commit one by one; pass a bun.Tx to make them all or
// nothing.
func (c *Client) EnqueueMany(ctx context.Context, db bun.IDB, jobs []EnqueueParams) (inserted int, err error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	ctx, span := c.startSend(ctx, db, jobs)
	defer func() { c.endSend(ctx, span, jobs, false, err) }()
	trace := c.tel.Inject(ctx)
	limit, err := c.maxPacket(ctx, db)
	if err != nil {
		return 0, err
	}
	var batches []jobBatch
	var b jobBatch
	keys := map[string]bool{}
	head := c.jobSQL().InsertLen()
	for i, p := range jobs {
		row, err := c.jobValues(ctx, db, p, trace)
		if err == nil && p.Opts != nil && p.Opts.Sequence != "" {
			err = invalidJob{errors.New("EnqueueOpts.Sequence is for Enqueue, one job at a time")}
		}
		if err != nil {
			return 0, errorf("bunqueue: EnqueueMany: job %d: %w", i, err)
		}
		var key string
		if p.Opts != nil && p.Opts.UniqueKey != "" {
			if key = p.Opts.UniqueKey; keys[key] {
				continue // the first job of a key wins, as a pending one does
			}
			keys[key] = true
		}
		if len(b.rows) > 0 && (head+b.size+len(row) > limit-1024 || len(b.rows) == 1000) {
			batches = append(batches, b)
			b = jobBatch{}
		}
		b.add(row, key)
	}
	for _, b := range append(batches, b) {
		var n int
		err := c.retryOutsideTx(ctx, db, func() (err error) {
			n, err = c.insertBatch(ctx, db, b)
			return err
		})
		inserted += n
		if err != nil {
			return inserted, errorf("bunqueue: EnqueueMany: %w", c.notMigrated(err))
		}
	}
	return inserted, c.notifyEnqueued(ctx, db, jobs, inserted == 0) // PostgreSQL: wake other processes
}

// jobBatch is the rows of one multi-row INSERT of EnqueueMany, with their
// unique keys ("" for none).
type jobBatch struct {
	rows, keys []string
	size       int // of the rows and their separators
}

func (b *jobBatch) add(row, key string) {
	b.rows = append(b.rows, row)
	b.keys = append(b.keys, key)
	b.size += len(row) + 2
}

// without returns the batch without the rows whose key is in taken.
func (b jobBatch) without(taken map[string]bool) jobBatch {
	var rest jobBatch
	for i, row := range b.rows {
		if !taken[b.keys[i]] {
			rest.add(row, b.keys[i])
		}
	}
	return rest
}

// insertBatch inserts a batch and returns how many of its rows it
// inserted. Where a taken unique key fails the whole statement (MySQL),
// the rows whose keys pending jobs hold are left out and the others
// inserted again.
func (c *Client) insertBatch(ctx context.Context, db bun.IDB, b jobBatch) (int, error) {
	for finished := 0; ; {
		n, collided, err := c.jobSQL().InsertMany(ctx, db, b.rows)
		if !collided {
			return int(n), err
		}
		taken, err := c.pendingKeys(ctx, db, b.keys)
		if err != nil {
			return 0, err
		}
		rest := b.without(taken)
		if len(rest.rows) == len(b.rows) {
			// The pending job finished in between, or the table predates
			// schema version 2 and compares keys that differ as one.
			if finished++; finished == 3 {
				return 0, errors.New("jobs kept colliding with pending jobs of their unique keys that then finished (if the jobs tables predate schema version 2, run Migrate)")
			}
		}
		if b = rest; len(b.rows) == 0 {
			return 0, nil
		}
	}
}

// pendingKeys returns which of keys ("" for none) pending jobs hold, read
// as insertJob reads the pending job of one.
func (c *Client) pendingKeys(ctx context.Context, db bun.IDB, keys []string) (map[string]bool, error) {
	var ask []string
	for _, k := range keys {
		if k != "" {
			ask = append(ask, k)
		}
	}
	var held []string
	if len(ask) > 0 {
		var err error
		if held, err = c.jobSQL().PendingKeys(ctx, db, ask); err != nil {
			return nil, err
		}
	}
	taken := make(map[string]bool, len(held))
	for _, k := range held {
		taken[k] = true
	}
	return taken, nil
}

// jobValues checks one job and renders its VALUES tuple.
func (c *Client) jobValues(ctx context.Context, db bun.IDB, p EnqueueParams, trace []byte) (string, error) {
	if p.Args == nil {
		return "", invalidJob{errors.New("bunqueue: enqueue: args must not be nil")}
	}
	var o EnqueueOpts
	if p.Opts != nil {
		o = *p.Opts
	}
	kind := p.Args.Kind()
	if o.Queue == "" {
		o.Queue = QueueDefault
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = MaxAttemptsDefault
	}
	fail := func(format string, a ...any) (string, error) {
		name := kind
		if checkText("", kind) != nil {
			name = strconv.Quote(kind)
		}
		return "", invalidJob{fmt.Errorf("bunqueue: enqueue %s: "+format, append([]any{name}, a...)...)}
	}
	if err := checkKind("Kind()", kind); err != nil {
		return fail("%w", err)
	}
	if err := o.check(c.cfg.JobQueues); err != nil {
		return fail("%w", err)
	}
	args, err := json.Marshal(p.Args)
	if err != nil {
		return fail("encode args as JSON: %w", err)
	}
	var meta []byte
	if len(o.Metadata) > 0 {
		if meta, err = json.Marshal(o.Metadata); err != nil {
			return fail("encode metadata: %w", err)
		}
	}
	limit, err := c.maxPacket(ctx, db)
	if err != nil {
		return "", err
	}
	// bun writes bytes as hex literals: two bytes of SQL per byte.
	if size := 2*(len(args)+len(meta)+len(trace)) + 1024; size > limit {
		return fail("the payload (%d bytes of JSON args, %d of metadata) does not fit in the server's max_allowed_packet (%d bytes)", len(args), len(meta), limit)
	}
	var unique, limitKey *string
	if o.UniqueKey != "" {
		unique = &o.UniqueKey
	}
	if o.LimitKey != "" {
		limitKey = &o.LimitKey
	}
	return c.jobSQL().Values(c.db.QueryGen(), jobsql.NewJob{
		Queue: o.Queue, Kind: kind, Args: args, Metadata: meta, Priority: o.Priority, MaxAttempts: o.MaxAttempts,
		RunAt: o.RunAt, Delay: o.Delay, UniqueKey: unique, LimitKey: limitKey, TraceContext: trace,
	}), nil
}

// check returns what makes o, its defaults filled in, unfit to enqueue
// into queues, naming the field; nil if nothing.
func (o *EnqueueOpts) check(queues map[string]JobQueueConfig) error {
	if err := checkText("EnqueueOpts.Queue", o.Queue); err != nil {
		return err
	}
	if _, known := queues[o.Queue]; !known {
		return fmt.Errorf("unknown queue %q: list it in Config.JobQueues", o.Queue)
	}
	switch {
	case o.Priority < -32768 || o.Priority > 32767:
		return fmt.Errorf("EnqueueOpts.Priority must be within -32768..32767, got %d", o.Priority)
	case o.MaxAttempts < 0:
		return fmt.Errorf("EnqueueOpts.MaxAttempts must not be negative, got %d", o.MaxAttempts)
	case o.MaxAttempts > math.MaxInt32:
		return fmt.Errorf("EnqueueOpts.MaxAttempts must be at most %d, got %d", math.MaxInt32, o.MaxAttempts)
	case o.Delay < 0:
		return fmt.Errorf("EnqueueOpts.Delay must not be negative, got %s", o.Delay)
	case o.Delay > 0 && !o.RunAt.IsZero():
		return errors.New("set EnqueueOpts.RunAt or EnqueueOpts.Delay, not both")
	case !o.RunAt.IsZero() && (o.RunAt.UTC().Year() < 1000 || o.RunAt.UTC().Year() > 9999):
		// MySQL's DATETIME range, which PostgreSQL's timestamptz and
		// SQLite's text hold too (SQLite compares times as text, which
		// needs four-digit years).
		return fmt.Errorf("EnqueueOpts.RunAt must be within years 1000 and 9999 (in UTC), got %s", o.RunAt.UTC().Format("2006-01-02 15:04:05.999999999 MST"))
	case len(o.UniqueKey) > 255:
		return fmt.Errorf("EnqueueOpts.UniqueKey must have at most 255 bytes, got %d", len(o.UniqueKey))
	case len(o.LimitKey) > 255:
		return fmt.Errorf("EnqueueOpts.LimitKey must have at most 255 bytes, got %d", len(o.LimitKey))
	}
	if err := checkText("EnqueueOpts.UniqueKey", o.UniqueKey); err != nil {
		return err
	}
	if err := checkText("EnqueueOpts.LimitKey", o.LimitKey); err != nil {
		return err
	}
	if err := o.checkSequence(); err != nil {
		return err
	}
	for k, v := range o.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("EnqueueOpts.Metadata[%q] must be valid UTF-8, key and value (JSON would store other bytes as U+FFFD), got %q", k, v)
		}
	}
	return nil
}

// checkKind returns what makes kind, the value of field (such as
// "Kind()"), unfit to name the jobs of a kind: its size, or what
// checkText says.
func checkKind(field, kind string) error {
	if kind == "" || len(kind) > 255 {
		return fmt.Errorf("%s must return 1 to 255 bytes, got %d", field, len(kind))
	}
	return checkText(field, kind)
}

// checkText returns what makes s, the value of field, unfit for a text
// column of the jobs tables: bytes that are not UTF-8, which bun writes as
// U+FFFD (so that "\xff" and "\xfe" would be stored as one string), or a
// NUL, which PostgreSQL's text cannot hold and bun's MySQL dialect drops.
func checkText(field, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%s must be valid UTF-8, got %q", field, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s must not contain a NUL byte, got %q", field, s)
	}
	return nil
}

// maxPacket returns the server's max_allowed_packet, read once.
func (c *Client) maxPacket(ctx context.Context, db bun.IDB) (int, error) {
	c.packetMu.Lock()
	defer c.packetMu.Unlock()
	if c.packet > 0 {
		return c.packet, nil
	}
	n, err := c.dialect.MaxStatement(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("bunqueue: %w", err)
	}
	c.packet = n
	return n, nil
}

// retryOutsideTx is retry when db is not a transaction; a transaction's
// fate is its owner's, so through one fn runs once.
func (c *Client) retryOutsideTx(ctx context.Context, db bun.IDB, fn func() error) error {
	if _, plain := db.(*bun.DB); !plain {
		return fn()
	}
	return c.retry(ctx, fn)
}
