package bunqueue

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/claim"
	"github.com/bunqueue/bunqueue/internal/cooldown"
	"github.com/bunqueue/bunqueue/internal/engine"
	"github.com/bunqueue/bunqueue/internal/prepared"
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

	// Set by Client.Add.
	client *Client
	cfg    QueueConfig[T]
	hooks  hooks
	wake   chan struct{}
	// eng is the queue as its claims run it (internal/claim): its query,
	// handlers, limits and cooldowns.
	eng *claim.Queue[T]
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
	return q.eng.Depth(ctx, limit)
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
	res := q.eng.RunBatch(ctx, nil, 1, nil)
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
	eng := &claim.Queue[T]{Name: q.name, Table: table, Query: q.query, Handler: q.handler, Batch: q.batch, Env: c.claims}
	if err := q.checkShape(c.db, eng); err != nil {
		return err
	}
	if eng.Creator, err = q.traceColumn(table); err != nil {
		return err
	}
	cfg := q.given.withDefaults(c.cfg)
	if eng.KeyLimit, eng.KeyOf, err = newKeyLimit(c, q.name, cfg, table); err != nil {
		return err
	}
	q.client, q.cfg, q.eng = c, cfg, eng
	q.hooks = newHooks(c.cfg.Hooks, q.given.hooks())
	q.wake = make(chan struct{}, 1)
	eng.OnError, eng.Hooks, eng.Timeout = cfg.OnError, q.hooks.around(q.name), cfg.Timeout
	eng.Prepares = c.stmts != nil && prepared.Preparable(table.Type, table)
	eng.Cool = cooldown.New(cfg.Cooldown, max(cfg.Cooldown, CooldownMax), CooldownLimit)
	eng.Slots = c.newSlots(q.name, cfg.GlobalLimit)
	eng.Rate = c.newRate(q.name, cfg.RateLimit)
	eng.KeyRate, eng.KeyRatePer = newKeyRate(c, q.name, cfg, table), cfg.KeyRate.Per
	eng.Init()
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

// traceColumn returns the creation context of each item: the
// traceparent in QueueConfig.TraceColumn, if it names one (the jobs
// queues set their own, read from the job). The column must be a string
// or *string field of the model.
func (q *Queue[T]) traceColumn(table *schema.Table) (func(item *T) context.Context, error) {
	col := q.given.traceColumn()
	if col == "" {
		return nil, nil
	}
	f, ok := table.FieldMap[col]
	if !ok {
		return nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.TraceColumn %q is not a column of model %s", q.name, col, table.Type)
	}
	if f.IndirectType.Kind() != reflect.String {
		return nil, fmt.Errorf("bunqueue: queue %q: QueueConfig.TraceColumn %q must be a string or *string field, not %s", q.name, col, f.IndirectType)
	}
	return func(item *T) context.Context {
		v := f.Value(reflect.ValueOf(item).Elem())
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return context.Background()
			}
			v = v.Elem()
		}
		return extractTraceParent(v.String())
	}, nil
}

// runner returns the queue as the client runs it: its settings, with
// the queue as its engine.
func (q *Queue[T]) runner() *runner {
	var checkQuery func(ctx context.Context) error
	if q.eng.HeadIndex == "" {
		checkQuery = q.eng.CheckQuery // not the jobs queues': Start checks their tables
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
			PerKey: perKey(q.eng.KeyLimit),
			Work:   q.eng,
		},
		table:      q.eng.Table,
		byPrimary:  &q.eng.ByPrimary,
		checkQuery: checkQuery,
		slots:      q.eng.Slots,
		keys:       q.eng.KeyLimit,
		rate:       q.eng.Rate,
		keyRate:    q.eng.KeyRate,
		limits:     queueLimits{q.cfg.GlobalLimit, q.cfg.KeyLimit, q.cfg.KeyColumn, q.cfg.RateLimit, q.cfg.KeyRate},
	}
}
