package bunqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunqueue/bunqueue/internal/cooldown"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// QueryFunc declares a queue: given a select over the queue's model, it
// adds the conditions (Where, WhereOr, WhereGroup; they may read other
// tables in subqueries, and those of a With) and the ORDER BY that make a
// row part of the queue, and returns the query it was given. The engine
// adds the rest to each statement it builds from it: the keys it reads
// or claims, LIMIT, the lock clause, the index and the columns; so
// Client.Add refuses a query that sets LIMIT, OFFSET, FOR, columns,
// another table or model, joins, index hints, DISTINCT, GROUP BY, HAVING
// or a UNION, naming the clause.
type QueryFunc func(q *bun.SelectQuery) *bun.SelectQuery

// HandlerFunc processes one row of type T inside the transaction that
// holds its lock. It must change the row, through tx, so that the row no
// longer matches the queue's query. Its writes commit with the row's
// completion; returning an error (or panicking) undoes them.
//
// In a batch of several rows, or with OnError, the undo is a rollback to
// the row's savepoint, which is taken right before the handler's first
// statement through tx (its query builders, Exec, Query, QueryRow, with
// any context): a handler that runs none costs no SAVEPOINT. Statements
// run on the *sql.Tx beneath (tx.Tx, or tx.Prepare and tx.Stmt, which
// bun passes through) bypass bun's hooks and are not seen: a handler
// that writes that way must run a statement through tx before its first
// such write (tx.ExecContext(ctx, "SELECT 1") will do), or, if it then
// failed, nothing would undo that write: it would commit with the batch.
type HandlerFunc[T any] func(ctx context.Context, tx bun.Tx, item *T) error

// BatchHandlerFunc processes the rows of one claimed batch together,
// inside the transaction that holds their locks: for example with one
// UPDATE … WHERE id IN (…) for all of them. It must change every row so
// that it no longer matches the queue's query, as HandlerFunc must. If it
// fails for a batch of several rows, its writes are undone (the locks are
// kept) and it is called again for each row alone, each in its own
// savepoint, so that one bad row fails alone and the others commit.
type BatchHandlerFunc[T any] func(ctx context.Context, tx bun.Tx, items []T) error

// Queue is a queue declared as a query over an existing bun model T: a row
// that matches the query is in the queue. Create it with NewQueue and add
// it to a Client.
type Queue[T any] struct {
	name    string
	query   QueryFunc
	handler HandlerFunc[T]
	batch   BatchHandlerFunc[T] // set by NewBatchQueue; handler calls it for one row
	given   *QueueConfig[T]

	jobsOnly[T] // set for the jobs queues (see jobsQueue), zero for a table queue

	hooks hooks // set by Client.Add

	// Set by Client.Add.
	client *Client
	cfg    QueueConfig[T]
	table  *schema.Table
	cool   *cooldown.Set
	wake   chan struct{}
	slots  *slots // the GlobalLimit's, nil without one (limit.go)
	// keyLimit is the KeyLimit, nil without one, and keyOf an item's key
	// (keylimit.go).
	keyLimit *keyLimit
	keyOf    func(item *T) (key string, val any, limited bool)
	// rate is the RateLimit, nil without one; keyRate the KeyRate, nil
	// without one (ratelimit.go).
	rate    *rateLimit
	keyRate *keyLimit
	// byPrimary: the model's key is the table's PRIMARY KEY (set by
	// Client.Start).
	byPrimary bool
	// prepares: a worker's claim of one row and its re-check may run as
	// prepared statements (see prepare.go; set by Client.Add).
	prepares bool
}

// jobsOnly are the fields of a Queue that only the jobs queues set (see
// Client.jobRunners and jobsQueue); a table queue has them zero.
type jobsOnly[T any] struct {
	trusted bool         // the library's own handler: skip the leave-the-query re-check
	rekey   *rekeyTarget // the table and key columns a handler must not re-key in SQL only (rekey.go)
	// The item's creation context, its span attributes, and the outcome
	// of a failure OnError recorded.
	creator  func(item *T) context.Context
	attrs    func(item *T) []attribute.KeyValue
	outcomeF func(item *T, cause error) string
	// complete, if set, takes the items whose handlers succeeded out of
	// the queue, in one statement, before the batch commits: their
	// handlers leave that to it. With prep, the statement for one item
	// may run prepared.
	complete func(ctx context.Context, tx bun.Tx, prep bool, items []*T) error
	// headIndex, if set, is the index that reads and claims at the head
	// of the queue go through, whatever the table's statistics say: the
	// jobs table's claim index.
	headIndex string
	// claimColumn, if set, is a computed column that claims read besides
	// the model's (jobsql.SQL.WaitColumn), and claimed is called with the
	// rows of each claim and the time, on this process's clock, just
	// before its statement ran.
	claimColumn string
	claimed     func(items []T, at time.Time)
}

// AnyQueue is implemented by every *Queue[T], whatever its T, so that a
// Client can hold queues of different models.
type AnyQueue interface {
	// Name returns the queue's name.
	Name() string

	attach(c *Client) error
	runner() *runner
}

// NewQueue declares a queue named name over the model T. query selects the
// rows that are waiting, in the order they should be processed; handler
// processes one row. cfg may be nil for defaults. Errors in the
// declaration are reported by Client.Add.
func NewQueue[T any](name string, query QueryFunc, handler HandlerFunc[T], cfg *QueueConfig[T]) *Queue[T] {
	return &Queue[T]{name: name, query: query, handler: handler, given: cfg}
}

// NewBatchQueue declares a queue like NewQueue, with a handler that gets
// each claimed batch (up to QueueConfig.BatchSize rows) at once. Lifecycle
// hooks are called once per call of the handler, with WorkInfo.Keys
// listing its rows.
func NewBatchQueue[T any](name string, query QueryFunc, handler BatchHandlerFunc[T], cfg *QueueConfig[T]) *Queue[T] {
	q := &Queue[T]{name: name, query: query, batch: handler, given: cfg}
	if handler != nil {
		q.handler = func(ctx context.Context, tx bun.Tx, item *T) error {
			one := []T{*item}
			err := handler(ctx, tx, one)
			*item = one[0]
			return err
		}
	}
	return q
}

// Name returns the queue's name.
func (q *Queue[T]) Name() string { return q.name }

// Count returns how many rows are waiting in the queue and not locked by
// anyone, counting at most limit of them, so that it stays cheap on a
// large backlog. It locks the rows it counts, skipping locked ones, for
// the length of one statement, in a transaction it rolls back.
func (q *Queue[T]) Count(ctx context.Context, limit int) (int, error) {
	if q.client == nil {
		return 0, ErrNotAdded
	}
	if limit <= 0 {
		return 0, fmt.Errorf("bunqueue: queue %q: Count limit must be positive, got %d", q.name, limit)
	}
	return q.client.countUnlocked(ctx, q.name, limit, func(tx bun.Tx) *bun.SelectQuery {
		return q.apply(tx.NewSelect().Model((*T)(nil))).Column(q.pkNames()...)
	})
}

// countUnlocked counts the rows of sel, at most limit, skipping the
// locked ones, in a READ COMMITTED transaction it rolls back.
func (c *Client) countUnlocked(ctx context.Context, queue string, limit int, sel func(tx bun.Tx) *bun.SelectQuery) (int, error) {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := sqldialect.Locking(sel(tx).Limit(int64(limit)), c.dialect.SkipLocked()).Rows(ctx)
	if err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("bunqueue: queue %q: count: %w", queue, err)
	}
	return n, nil
}

// ProcessNext claims the next waiting row, runs the handler on it and
// commits, in the calling goroutine. It reports whether a row was claimed;
// the error is the row's failure (an *ItemError) or what kept the
// transaction from committing. Useful in tests and cron-style programs;
// it needs the queue added to a Client, not started.
func (q *Queue[T]) ProcessNext(ctx context.Context) (bool, error) {
	if q.client == nil {
		return false, ErrNotAdded
	}
	res := q.runBatch(ctx, nil, 1, nil)
	return res.Claimed > 0, errors.Join(append(res.ItemErrs, res.Err)...)
}

// attach checks the queue's declaration, model, query and configuration
// and ties the queue to c (see Client.Add).
func (q *Queue[T]) attach(c *Client) error {
	if err := q.checkDeclared(); err != nil {
		return err
	}
	table, err := q.modelTable(c.db)
	if err != nil {
		return err
	}
	if err := q.checkShape(c.db); err != nil {
		return err
	}
	if err := q.useTraceColumn(table); err != nil {
		return err
	}
	q.hooks = newHooks(c.cfg.Hooks, q.given.hooks())
	q.client = c
	q.cfg = q.given.withDefaults(c.cfg)
	q.table = table
	q.rekey = newRekeyTarget(table)
	q.prepares = c.stmts != nil && preparable(table.Type, table)
	q.cool = cooldown.New(q.cfg.Cooldown, max(q.cfg.Cooldown, CooldownMax), CooldownLimit)
	q.wake = make(chan struct{}, 1)
	q.slots = c.newSlots(q.name, q.cfg.GlobalLimit)
	q.keyLimit, q.keyOf, err = newKeyLimit(c, q, table)
	if err != nil {
		return err
	}
	q.rate = c.newRate(q.name, q.cfg.RateLimit)
	q.keyRate = newKeyRate(c, q, table)
	return nil
}

// checkDeclared checks what NewQueue was given, and that the queue is
// not added to a client already.
func (q *Queue[T]) checkDeclared() error {
	switch {
	case q.name == "":
		return errors.New("bunqueue: NewQueue: the queue name must not be empty")
	case q.query == nil:
		return fmt.Errorf("bunqueue: queue %q: the query function must not be nil", q.name)
	case q.handler == nil:
		return fmt.Errorf("bunqueue: queue %q: the handler must not be nil", q.name)
	case q.client != nil:
		return fmt.Errorf("bunqueue: queue %q is already added to a Client", q.name)
	}
	return q.given.validate(q.name)
}

// modelTable returns bun's table of the model T, which must be a struct
// with a primary key.
func (q *Queue[T]) modelTable(db *bun.DB) (*schema.Table, error) {
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("bunqueue: queue %q: the model must be a struct type, got %s", q.name, typ)
	}
	table := db.Table(typ)
	if len(table.PKs) == 0 {
		return nil, fmt.Errorf("bunqueue: queue %q: model %s has no primary key; mark its key field with `bun:\",pk\"`", q.name, typ)
	}
	return table, nil
}

// useTraceColumn makes the traceparent in QueueConfig.TraceColumn, if it
// names one, the creation context of each item, unless the queue has its
// own (the jobs queues read theirs from the job). The column must be a
// string or *string field of the model.
func (q *Queue[T]) useTraceColumn(table *schema.Table) error {
	col := q.given.traceColumn()
	if col == "" {
		return nil
	}
	f, ok := table.FieldMap[col]
	if !ok {
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.TraceColumn %q is not a column of model %s", q.name, col, table.Type)
	}
	if f.IndirectType.Kind() != reflect.String {
		return fmt.Errorf("bunqueue: queue %q: QueueConfig.TraceColumn %q must be a string or *string field, not %s", q.name, col, f.IndirectType)
	}
	if q.creator == nil {
		q.creator = func(item *T) context.Context {
			v := f.Value(reflect.ValueOf(item).Elem())
			if v.Kind() == reflect.Pointer {
				if v.IsNil() {
					return context.Background()
				}
				v = v.Elem()
			}
			return extractTraceParent(v.String())
		}
	}
	return nil
}

// runner returns the queue as the client runs it: its settings, with
// the queue as its engine.
func (q *Queue[T]) runner() *runner {
	var checkQuery func(ctx context.Context) error
	if q.headIndex == "" {
		checkQuery = q.checkQuery // not the jobs queues': Start checks their tables
	}
	return &runner{
		Queue: engine.Queue{
			Name: q.name,
			Settings: engine.Settings{
				Workers:   limitedWorkers(q.cfg.Workers, q.cfg.GlobalLimit),
				Batch:     q.cfg.BatchSize,
				SelfSized: q.cfg.selfSized,
				Poll:      q.cfg.PollInterval,
				Timeout:   q.cfg.Timeout,
			},
			Wake:   q.wake,
			PerKey: perKey(q.keyLimit),
			Work:   work[T]{q},
		},
		table:      q.table,
		byPrimary:  &q.byPrimary,
		checkQuery: checkQuery,
		slots:      q.slots,
		keys:       q.keyLimit,
		rate:       q.rate,
		keyRate:    q.keyRate,
		limits:     queueLimits{q.cfg.GlobalLimit, q.cfg.KeyLimit, q.cfg.KeyColumn, q.cfg.RateLimit, q.cfg.KeyRate},
	}
}

func (q *Queue[T]) pkNames() []string {
	names := make([]string, len(q.table.PKs))
	for i, f := range q.table.PKs {
		names[i] = f.Name
	}
	return names
}

// key returns the row's primary key values and a readable id for them.
func (q *Queue[T]) key(item *T) ([]any, string) {
	v := reflect.ValueOf(item).Elem()
	vals := make([]any, len(q.table.PKs))
	var b strings.Builder
	for i, f := range q.table.PKs {
		vals[i] = f.Value(v).Interface()
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%v", f.Name, vals[i])
	}
	return vals, b.String()
}

// excludeCooling keeps rows this process is cooling down out of a claim.
func (q *Queue[T]) excludeCooling(sel *bun.SelectQuery, now time.Time) *bun.SelectQuery {
	keys := q.cool.Active(now)
	if len(keys) == 0 {
		return sel
	}
	cs := make([]engine.Key, len(keys))
	for i, k := range keys {
		cs[i].Vals = k
	}
	return q.exceptKeys(sel, cs)
}

// startItemSpan starts the span of one claimed item.
func (q *Queue[T]) startItemSpan(ctx context.Context, batch trace.Span, item *T, n int) *itemSpan {
	vals, id := q.key(item)
	if len(vals) == 1 {
		id = fmt.Sprint(vals[0]) // messaging.message.id: the bare key
	}
	creator := context.Background()
	if q.creator != nil {
		creator = q.creator(item)
	}
	var attrs []attribute.KeyValue
	if q.attrs != nil {
		attrs = q.attrs(item)
	}
	return q.client.tel.StartItem(ctx, batch, q.name, n, id, creator, attrs...)
}

// failureOutcome is the outcome of an item whose failure OnError recorded.
func (q *Queue[T]) failureOutcome(item *T, cause error) string {
	if q.outcomeF != nil {
		return q.outcomeF(item, cause)
	}
	return outcomeFailed
}

// batchInfo describes a batch to the lifecycle hooks.
func (q *Queue[T]) batchInfo(items []T) *WorkInfo {
	keys := make([]string, len(items))
	for i := range items {
		_, keys[i] = q.key(&items[i])
	}
	return &WorkInfo{Queue: q.name, Keys: keys}
}

// workInfo describes an item to the lifecycle hooks.
func (q *Queue[T]) workInfo(item *T) *WorkInfo {
	_, id := q.key(item)
	return &WorkInfo{Queue: q.name, Key: id}
}

// fetch reads on db, with a plain read that locks nothing, the keys
// of up to limit rows that match the queue's query, in its order, leaving out
// the rows this process is cooling down.
func (q *Queue[T]) fetch(ctx context.Context, db bun.IDB, limit int) ([]engine.Key, error) {
	rows := make([]T, 0, limit)
	cols := q.pkNames()
	if q.keyLimit != nil && !slices.Contains(cols, q.keyLimit.column) {
		cols = append(cols, q.keyLimit.column) // for the feed to keep a key's rows apart
	}
	sel := q.waiting(db, &rows).Comment(engine.ReadComment(q.name)).Column(cols...).Limit(int64(limit))
	if err := sel.Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("bunqueue: queue %q: read waiting rows: %w", q.name, err)
	}
	keys := make([]engine.Key, len(rows))
	for i := range rows {
		keys[i].Vals, keys[i].ID = q.key(&rows[i])
		if q.keyLimit != nil {
			if key, _, limited := q.keyOf(&rows[i]); limited {
				keys[i].LimitKey = key
			}
		}
	}
	return keys, nil
}

// waiting returns the queue's read of its waiting rows into model on db,
// without the rows this process is cooling down: the feed's read, and the
// idle watcher's probe, at the head of the queue's index.
func (q *Queue[T]) waiting(db bun.IDB, model any) *bun.SelectQuery {
	now := time.Now()
	return q.excludeFull(q.excludeCooling(q.apply(q.atHead(db.NewSelect().Model(model))), now), now)
}

// onlyKeys restricts a claim to the rows of keys.
func (q *Queue[T]) onlyKeys(sel *bun.SelectQuery, keys []engine.Key) *bun.SelectQuery {
	return q.whereKeys(sel, "IN", keys)
}

// exceptKeys leaves the rows of keys out of a claim.
func (q *Queue[T]) exceptKeys(sel *bun.SelectQuery, keys []engine.Key) *bun.SelectQuery {
	return q.whereKeys(sel, "NOT IN", keys)
}

func (q *Queue[T]) whereKeys(sel *bun.SelectQuery, op string, keys []engine.Key) *bun.SelectQuery {
	if len(q.table.PKs) == 1 {
		flat := make([]any, len(keys))
		for i, k := range keys {
			flat[i] = k.Vals[0]
		}
		return sel.Where("?TableAlias.? "+op+" (?)", bun.Ident(q.table.PKs[0].Name), bun.List(flat))
	}
	tuples := make([]bun.TupleValues, len(keys))
	for i, k := range keys {
		tuples[i] = bun.Tuple(k.Vals)
	}
	return sel.Where("(?TablePKs) "+op+" (?)", bun.List(tuples))
}

// work is the queue as the engine runs it (engine.Work).
type work[T any] struct{ q *Queue[T] }

// Fetch implements engine.Work (see Queue.fetch).
func (w work[T]) Fetch(ctx context.Context, db bun.IDB, limit int) ([]engine.Key, error) {
	return w.q.fetch(ctx, db, limit)
}

// Probe implements engine.Work (see Queue.probe).
func (w work[T]) Probe(db bun.IDB, except []engine.Key) *bun.SelectQuery {
	return w.q.probe(db, except)
}

// RunBatch implements engine.Work (see Queue.runBatch).
func (w work[T]) RunBatch(ctx context.Context, s *session, limit int, keys []engine.Key) engine.Result {
	return w.q.runBatch(ctx, s, limit, keys)
}

// Depth implements engine.Work (see Queue.Count).
func (w work[T]) Depth(ctx context.Context, limit int) (int, error) { return w.q.Count(ctx, limit) }

// Explain implements engine.Work (see Queue.explain).
func (w work[T]) Explain() (*bun.SelectQuery, *schema.Table) { return w.q.explain() }
