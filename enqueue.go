package bunqueue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// EnqueueOpts are the options of one job. A nil *EnqueueOpts, and zero
// fields, mean defaults.
type EnqueueOpts struct {
	// Queue is the jobs queue, one of Config.JobQueues. Defaults to
	// QueueDefault.
	Queue string
	// Priority orders the jobs of a queue: lower runs first, then earlier
	// RunAt, then enqueue order. Defaults to 0; -32768 to 32767.
	Priority int
	// RunAt schedules the job for a time (stored in UTC). Zero means now,
	// by the database clock.
	RunAt time.Time
	// Delay schedules the job this long after now, by the database clock.
	// Set RunAt or Delay, not both.
	Delay time.Duration
	// MaxAttempts is how many attempts the job gets before it moves to the
	// failed-jobs table. Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// UniqueKey, if set, makes the job unique while it is pending: as long
	// as a job with this key waits or runs, enqueueing another with the
	// same key returns the existing job (EnqueueResult.Duplicate) and
	// inserts nothing. The key is released when the job completes or
	// fails for good. At most 255 bytes.
	UniqueKey string
	// Metadata is stored with the job and given to its worker in
	// Job.Metadata.
	Metadata map[string]string
}

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
	ctx, span := c.tel.startSend(ctx, params)
	defer func() {
		if err == nil {
			span.SetAttributes(semconv.MessagingMessageID(strconv.FormatInt(res.ID, 10)))
		}
		c.tel.endSend(ctx, span, params, res.Duplicate, err)
	}()
	row, err := c.jobValues(ctx, db, params[0], c.tel.inject(ctx))
	if err != nil {
		return EnqueueResult{}, err
	}
	var key *string
	if opts != nil && opts.UniqueKey != "" {
		key = &opts.UniqueKey
	}
	err = c.retryOutsideTx(ctx, db, func() (err error) {
		res, err = c.insertJob(ctx, db, row, key)
		return err
	})
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("bunqueue: enqueue %s: %w", args.Kind(), c.notMigrated(err))
	}
	return res, nil
}

// insertJob inserts one job, rendered as a VALUES tuple. A job whose
// unique key is pending is not inserted (INSERT IGNORE: the duplicate
// check reads the unique index only, so it does not wait for the row lock
// of a job that is running); the pending job's id is read instead, with a
// shared lock on the unique index entry, which sees the latest committed
// row whatever the transaction's snapshot.
func (c *Client) insertJob(ctx context.Context, db bun.IDB, values string, uniqueKey *string) (EnqueueResult, error) {
	head, tail := c.dialect.InsertIgnore()
	for range 3 {
		id, inserted, err := c.dialect.InsertID(ctx, db, head+insertJobsSQL+values+tail)
		if err != nil || inserted {
			return EnqueueResult{ID: id}, err
		}
		if uniqueKey == nil {
			return EnqueueResult{}, errors.New("the job was not inserted")
		}
		var ids []int64
		if err := db.NewRaw("SELECT id FROM bunqueue_jobs WHERE unique_key = ? "+c.dialect.ShareLock(), *uniqueKey).Scan(ctx, &ids); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return EnqueueResult{}, err
		}
		if len(ids) == 1 {
			return EnqueueResult{ID: ids[0], Duplicate: true}, nil
		}
		// The pending job finished in between: insert again.
	}
	return EnqueueResult{}, fmt.Errorf("the job with unique key %q kept finishing while it was enqueued again", *uniqueKey)
}

// EnqueueMany adds jobs like Enqueue, with multi-row INSERTs (as few as
// max_allowed_packet allows), and returns how many were inserted: jobs
// whose UniqueKey is pending are skipped. If any job is invalid, nothing is
// inserted. Through a *bun.DB the statements commit one by one; pass a
// bun.Tx to make them all or nothing.
func (c *Client) EnqueueMany(ctx context.Context, db bun.IDB, jobs []EnqueueParams) (inserted int, err error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	ctx, span := c.tel.startSend(ctx, jobs)
	defer func() { c.tel.endSend(ctx, span, jobs, false, err) }()
	trace := c.tel.inject(ctx)
	limit, err := c.maxPacket(ctx, db)
	if err != nil {
		return 0, err
	}
	head, tail := c.dialect.InsertIgnore()
	var stmts []string
	var b strings.Builder
	rows := 0
	for i, p := range jobs {
		row, err := c.jobValues(ctx, db, p, trace)
		if err != nil {
			return 0, fmt.Errorf("bunqueue: EnqueueMany: job %d: %w", i, err)
		}
		if rows > 0 && (b.Len()+len(row)+2 > limit-1024 || rows == 1000) {
			b.WriteString(tail)
			stmts = append(stmts, b.String())
			b.Reset()
			rows = 0
		}
		if rows == 0 {
			b.WriteString(head + insertJobsSQL)
		} else {
			b.WriteString(",\n")
		}
		b.WriteString(row)
		rows++
	}
	b.WriteString(tail)
	stmts = append(stmts, b.String())
	for _, s := range stmts {
		err := c.retryOutsideTx(ctx, db, func() error {
			n, err := c.dialect.InsertCount(ctx, db, s)
			inserted += int(n)
			return err
		})
		if err != nil {
			return inserted, fmt.Errorf("bunqueue: EnqueueMany: %w", c.notMigrated(err))
		}
	}
	return inserted, nil
}

// insertJobsSQL follows the dialect's InsertIgnore head: a job whose
// unique key is pending is skipped; every other value is checked before
// it gets here, so no other error can be turned into a warning.
const insertJobsSQL = " bunqueue_jobs (queue, kind, args, metadata, priority, max_attempts, run_at, created_at, unique_key, trace_context) VALUES "

// jobValues checks one job and renders its VALUES tuple.
func (c *Client) jobValues(ctx context.Context, db bun.IDB, p EnqueueParams, trace []byte) (string, error) {
	if p.Args == nil {
		return "", errors.New("bunqueue: enqueue: args must not be nil")
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
		return "", fmt.Errorf("bunqueue: enqueue %s: "+format, append([]any{kind}, a...)...)
	}
	switch _, known := c.cfg.JobQueues[o.Queue]; {
	case kind == "" || len(kind) > 255:
		return fail("Kind() must return 1 to 255 bytes")
	case !known:
		return fail("unknown queue %q: list it in Config.JobQueues", o.Queue)
	case o.Priority < -32768 || o.Priority > 32767:
		return fail("EnqueueOpts.Priority must be within -32768..32767, got %d", o.Priority)
	case o.MaxAttempts < 0:
		return fail("EnqueueOpts.MaxAttempts must not be negative, got %d", o.MaxAttempts)
	case o.Delay < 0:
		return fail("EnqueueOpts.Delay must not be negative, got %s", o.Delay)
	case o.Delay > 0 && !o.RunAt.IsZero():
		return fail("set EnqueueOpts.RunAt or EnqueueOpts.Delay, not both")
	case len(o.UniqueKey) > 255:
		return fail("EnqueueOpts.UniqueKey must have at most 255 bytes, got %d", len(o.UniqueKey))
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
	runAt := bun.Safe(c.dialect.Now())
	if d := o.Delay; d > 0 {
		runAt = bun.Safe(c.dialect.NowPlus(d))
	}
	if !o.RunAt.IsZero() {
		runAt = bun.Safe(c.dialect.Time(o.RunAt))
	}
	var unique any
	if o.UniqueKey != "" {
		unique = o.UniqueKey
	}
	var metaArg any
	if meta != nil {
		metaArg = meta
	}
	var traceArg any
	if trace != nil {
		traceArg = trace
	}
	b, err := db.NewRaw("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		o.Queue, kind, args, metaArg, o.Priority, o.MaxAttempts, runAt, bun.Safe(c.dialect.Now()), unique, traceArg).AppendQuery(c.db.QueryGen(), nil)
	if err != nil {
		return "", fmt.Errorf("bunqueue: enqueue %s: %w", kind, err)
	}
	return string(b), nil
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
