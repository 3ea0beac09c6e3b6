// Package bunqueue makes any table of an application a work queue on
// MySQL 8, MariaDB or PostgreSQL, with SELECT … FOR UPDATE SKIP LOCKED doing the
// locking. It works through the application's [bun.DB], and its workers
// run as goroutines inside the application's process.
//
// # The queue is the query
//
// A queue is a query over an existing bun model: a row that matches the
// query is, by definition, in the queue. A worker locks the next matching
// rows in a transaction, skipping rows other transactions hold, runs the
// handler on them and commits. The query's ORDER BY is the queue's
// priority, a condition on a time column is a schedule
// (retry_at <= UTC_TIMESTAMP(6), or portably [Now]), and one table can hold several queues. There are no
// bookkeeping columns and no claims to expire: if a worker dies, the
// server rolls its transaction back and the row is simply in the queue
// again.
//
// There is one rule: the handler must change the row, through the
// transaction it is given, so that the row no longer matches the query.
// That is how a row leaves the queue. The library checks it instead of
// trusting it: before commit it runs the queue's query again for the
// processed rows, by primary key. A row that still matches had its
// handler's writes rolled back; it is reported with an [ItemError] that
// wraps [ErrStillQueued] and cooled down, so it is not processed in a loop.
//
// # Declaring a queue
//
// [NewQueue] takes a name, a [QueryFunc] that adds the queue's conditions
// and ORDER BY to a select over the model (not LIMIT or FOR: the library
// adds them), a [HandlerFunc] and an optional [QueueConfig]. The model must
// be a struct with a primary key (`bun:",pk"`).
//
//	emails := bunqueue.NewQueue("emails",
//		func(q *bun.SelectQuery) *bun.SelectQuery {
//			return q.Where("status = 'waiting'").
//				Where("retry_at IS NULL OR retry_at <= UTC_TIMESTAMP()").
//				Order("id")
//		},
//		func(ctx context.Context, tx bun.Tx, e *Email) error {
//			if err := send(ctx, e); err != nil {
//				return err // the handler's writes are undone, then OnError runs
//			}
//			_, err := tx.NewUpdate().Model(e).Set("status = 'sent'").WherePK().Exec(ctx)
//			return err
//		},
//		&bunqueue.QueueConfig[Email]{Workers: 4, OnError: recordFailure},
//	)
//
//	client, err := bunqueue.NewClient(db, nil) // nil: default Config
//	err = client.Add(emails)   // checks the declaration; errors name the field
//	err = client.Start(ctx)    // checks the server and tables, starts the workers
//	defer client.Stop(ctx)     // stops claiming, lets rows in flight commit
//
// [Client.Add] reports what is wrong with a declaration: an empty name, a
// nil query or handler, a negative setting, a model that is not a struct
// or has no primary key, a name already used on the client, a queue
// already added to another client. Once a queue is added,
// [Queue.ProcessNext] processes one row in the calling goroutine and
// [Queue.Count] counts waiting rows, with or without [Client.Start]: they
// suit tests and cron-style programs.
//
// # Reading and claiming
//
// Workers that all claim at the head of the same index step over each
// other's locked rows, and stop scaling at a handful. So one goroutine per
// queue, its feed, reads the primary keys of the next waiting rows with a
// plain SELECT that locks nothing (tagged /* bunqueue: read <queue> */),
// when the workers run short, at a wake-up ([Client.QueryHook]) or after
// [QueueConfig.PollInterval]; an idle queue costs one such read per poll.
// On MySQL and MariaDB it reads at READ UNCOMMITTED, on a connection of
// its own while the queue has work: a READ COMMITTED read of an index that
// the workers keep changing looks up every entry's row to find the version
// it may see. The read only suggests rows; the claim below checks them.
// It hands each key to one worker of this process until that worker is
// done with it, and leaves a row the claim found locked by another
// transaction alone for a moment. Each worker then repeats one
// transaction:
//
//   - BEGIN at READ COMMITTED. A worker keeps its connection while work
//     comes, with READ COMMITTED set once for the session, and discards it
//     (it never returns to the pool with that setting) after
//     PollInterval without work or a failed transaction. READ COMMITTED
//     takes no gap locks on searches, so claimers do not block producers
//     that insert rows.
//   - Lock its keys by primary key: the queue's query, plus the keys,
//     FORCE INDEX (PRIMARY) and FOR UPDATE SKIP LOCKED. The query is
//     checked again under the lock, so a row that left the queue since the
//     read is not processed. Keys another process took meanwhile are
//     replaced from the head of the queue (the query with LIMIT and FOR
//     UPDATE SKIP LOCKED), leaving out the rows this process is cooling
//     down.
//   - Run the handler on each row with the transaction's [bun.Tx]. A panic
//     is recovered and becomes a [PanicError].
//   - Run the queue's query again for the rows, by primary key (the one
//     rule above), and COMMIT once.
//
// A batch is at most [QueueConfig.BatchSize] rows. Left zero, it sizes
// itself: each worker starts with one row per transaction and doubles its
// batch while a batch takes less than half of [BatchTarget], up to
// [BatchSizeDefault], halving it when one takes longer. When fewer rows
// wait than the workers could take, each takes a fair share.
//
// Each row runs inside a SAVEPOINT when the batch has more than one row
// or [QueueConfig.OnError] is set. A failing row is rolled back to its
// savepoint, so the other rows of the batch keep their work, and OnError
// runs for it in the batch's transaction while the row is still locked;
// its writes commit with the batch. If OnError fails, its writes are
// rolled back too. A lone row without OnError needs no savepoint: its
// failure rolls the whole transaction back. A row whose handler succeeded
// but that still matches the query is rolled back to its savepoint, which
// undoes the rows after it in the batch as well: they return to the queue
// as they were, and their handlers will run again.
//
// OnError is where a failure is recorded on the row: an attempts count, a
// retry_at in the future, a failed status, anything that takes the row out
// of the query for a while or for good. Compare times in SQL, on the
// database's clock (UTC_TIMESTAMP()), not the application's. A failure that is not
// recorded that way (no OnError, OnError failed, ErrStillQueued, or OnError
// wrote but the row still matches) leaves the row in the queue; this
// process then leaves it alone for [QueueConfig.Cooldown], a wait that
// doubles on each further failure up to [CooldownMax] (±10% jitter), for at
// most [CooldownLimit] rows per queue. The cooldown is kept in memory:
// other processes, and this one after a restart, see the row at once.
//
// A deadlock (error 1213), a lock wait timeout (1205) or MariaDB's
// "record has changed" (1020), from any statement including the handler's
// own, rolls the whole transaction back and runs it again after a short
// jittered wait, a few times, before the error is returned; the handler
// may therefore run again on the same row.
//
// A row's failure is an [ItemError]: [Queue.ProcessNext] returns it, and a
// started client's workers log it to [Config.Logger].
//
// # Batch handlers
//
// [NewBatchQueue] declares a queue whose [BatchHandlerFunc] gets the whole
// locked batch, to change it in one statement. The call runs in one
// savepoint; if it fails, its writes are undone and it is called again for
// each row alone, each in its own savepoint, so that one bad row fails
// alone. Hooks see one call, with [WorkInfo.Keys]; tracing makes one
// process span per call, linked to each row's creation context.
//
// # Workers
//
// [QueueConfig.Workers] goroutines per queue process the rows the feed
// hands them; each holds one database connection while it has work.
// After a failed transaction a worker backs off exponentially.
//
// # Jobs
//
// Work that has no row of its own goes in the jobs table, created by
// [Migrate] (or the SQL of [MigrationSQL]). A job's arguments are a type
// that implements [JobArgs]; [AddWorker] registers a [Worker] for its
// kind; [Client.Enqueue] inserts it through a [bun.IDB], so that a job
// enqueued through the app's transaction exists if and only if that
// transaction commits. [EnqueueOpts] set the queue, priority, schedule,
// attempts, a unique key and metadata.
//
// The jobs table is itself a query-defined queue: in [ModeLock], the
// default, a job runs inside the transaction that locks it and completes
// there. A worker's nil deletes the job (or keeps it as completed for
// [Config.Retention]); [Snooze] runs it again later without using an
// attempt; [Cancel] fails it at once; any other error or a panic retries it
// after [Config.Backoff] until its MaxAttempts, then moves it to the
// failed jobs, which [Client.FailedJobs], [Client.RetryFailed] and
// [Client.DeleteFailed] read and act on.
//
// In [ModeLease] a short transaction claims and leases the job, the worker
// runs outside any transaction, heartbeats extend the lease, and the
// completion counts only if the lease token still matches. See
// [JobQueueConfig].
//
// # Tracing, metrics and hooks
//
// A client makes OpenTelemetry spans and metrics through
// [Config.TracerProvider] and [Config.MeterProvider] (the otel globals
// when nil): a PRODUCER span "send {queue}" per Enqueue, whose context is
// stored with the job, and a CONSUMER span "process {queue}" per claim
// transaction, started before BEGIN so that SQL spans nest under it, with a
// link to the item's creation context ([Config.ParentProcessSpans] makes it
// a child instead). Rows of the app's own tables can carry that context in
// a column ([QueueConfig.TraceColumn], filled with [TraceParent]). A
// worker's claim of one row by its key, the re-check that the row left
// its queue, and a lone lock-mode job's DELETE run as statements prepared
// on the server, outside bun's query hooks: bunqueue makes their CLIENT
// spans itself
// ([Config.NoPreparedStatements] runs them in text, through bun).
//
// [Client.QueryHook] wakes this process's workers when a transaction that
// wrote to a watched table commits, so that work created in-process starts
// at once; polling remains for work created elsewhere. Lifecycle hooks
// ([HookWorkBegin], [HookWorkEnd]) run around every handler and worker.
//
// # Guarantees
//
//   - At least once: a row stays in its queue until a transaction that
//     takes it out commits.
//   - Never two workers on one row at a time: the row's lock is held for
//     the whole of its handler, and the lock is the server's, so this holds
//     across processes and hosts, for as long as the worker's connection
//     lives. If the server ends the connection (KILL, wait_timeout, a
//     network failure) while the handler is busy outside the database,
//     the row is free again and another worker may take it while the first
//     handler runs on; none of the first handler's writes can commit.
//   - Database writes made through the item's tx happen exactly once,
//     together with the change that takes the row out of the queue: they
//     commit together or not at all.
//   - External effects (an email, an HTTP call) can happen more than once:
//     a crash, a lost connection or a failed commit after the effect puts
//     the row back in the queue. Make them idempotent.
//
// Writes made through the [bun.DB] instead of the item's tx are not part
// of the item's transaction: they are not undone when it fails, and they
// can wait for locks the item's transaction holds.
//
// # Stopping
//
// [Client.Stop] stops claiming and waits for the transactions in flight to
// commit. If its context ends first, it cancels the handlers' contexts:
// their transactions roll back and their rows return to the queue. It then
// waits for the handlers to return and reports the context's error. Stop
// may be called more than once, and before Start. A client runs once:
// [Client.Start] after Stop returns [ErrStopped].
//
// # Requirements
//
//   - MySQL 8.0.1+ or MariaDB 10.6+, through bun's mysqldialect, or
//     PostgreSQL 12+, through pgdialect (timestamptz time columns). Start
//     proves that the server skips locked rows, with two connections and a
//     two-row table named bunqueue_probe that it creates if missing (a
//     user without the CREATE privilege needs it created once by an
//     administrator: CREATE TABLE bunqueue_probe (id INT NOT NULL PRIMARY
//     KEY) ENGINE=InnoDB).
//   - On MySQL, InnoDB tables: other engines ignore row locks and SKIP
//     LOCKED. Start refuses a queue whose table is missing, is a view, or
//     (MySQL) is not InnoDB.
//   - parseTime=true&loc=UTC in the DSN, so that DATETIME columns scan into
//     time.Time as UTC.
//   - A connection pool with room for the workers: Start refuses a pool
//     whose SetMaxOpenConns is below the sum of all queues' workers, plus
//     one per queue (its feed's reads), plus one (0, no limit, is fine).
//   - An index that serves the queue's query: its WHERE columns, then its
//     ORDER BY columns. Without one, every read of the queue scans or
//     sorts its waiting rows. Start runs EXPLAIN on each queue's read and
//     warns, naming an index that would serve it, or refuses to start
//     with [Config.StrictQueryPlans].
//
// # Operating
//
// [Client.Stats] reports each queue's workers, depth, rows in flight and
// rows processed and failed over the last minute and hour in this process;
// [Client.RecentFailures] the latest failures. Package
// github.com/bunqueue/bunqueue/dashboard serves them, and the failed jobs
// with Retry and Delete, as an http.Handler to mount behind the app's own
// authentication. The command github.com/bunqueue/bunqueue/cmd/bunqueue
// migrates, reports the jobs table's stats, lists, shows, retries and
// deletes failed jobs, and measures throughput (bench).
package bunqueue
