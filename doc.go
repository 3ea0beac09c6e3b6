// Package bunqueue makes any table of an application a reliable work
// queue on MySQL 8, MariaDB, PostgreSQL or SQLite, with SELECT … FOR
// UPDATE SKIP LOCKED doing the locking. It works through the application's
// [bun.DB]; its workers run as goroutines inside the application's process,
// and every item is processed in an OpenTelemetry-traced transaction.
//
// This is a short tour of the API. The repository's README and its docs
// directory hold the rest: how rows are claimed, the guarantees and how
// they are tested, each server's requirements, the measured figures
// (https://github.com/bunqueue/bunqueue).
//
// # The queue is the query
//
// A queue is a query over an existing bun model: a row that matches the
// query is, by definition, in the queue. A worker locks the next matching
// rows in a transaction, skipping rows other transactions hold, runs the
// handler on them and commits. The query's ORDER BY is the queue's
// priority, a condition on a time column is a schedule (compared on the
// database's clock: [Now], [NowPlus]), and one table can hold several
// queues. There are no bookkeeping columns and no claims to expire: if a
// worker dies, the server rolls its transaction back and the row is simply
// in the queue again.
//
// # The one rule
//
// The handler must change the row, through the transaction it is given,
// so that the row no longer matches the query: that is how a row leaves
// the queue. The library checks it instead of trusting it: before commit
// it runs the queue's query again for the processed rows, by primary key.
// A row that still matches has its handler's writes rolled back, is
// reported with an [ItemError] that wraps [ErrStillQueued], and is cooled
// down, so that it is not processed in a loop. A handler that changes the
// row's primary key must set its model's key too, so that the re-check
// looks the row up under both keys; one that changes the key in SQL only,
// by an UPDATE through its tx and with its context, is caught as well.
//
// # Declaring a queue
//
// [NewQueue] takes a name, a [QueryFunc] that adds the queue's conditions
// and ORDER BY (not LIMIT or FOR: the library adds them), a [HandlerFunc]
// and an optional [QueueConfig], whose zero fields mean defaults. The model
// must be a struct with a primary key.
//
//	emails := bunqueue.NewQueue("emails",
//		func(q *bun.SelectQuery) *bun.SelectQuery {
//			return q.Where("status = 'waiting'").
//				Where("retry_at IS NULL OR retry_at <= ?", bunqueue.Now(db)).
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
// [NewBatchQueue] declares a queue whose [BatchHandlerFunc] gets the whole
// locked batch, to change it in one statement; if a call fails, it is
// called again for each row alone, so that one bad row fails alone.
//
// # The client
//
// A [Client] runs the queues added to it:
//
//	client, err := bunqueue.NewClient(db, nil) // nil: default Config
//	err = client.Add(emails)   // checks the declaration; errors name the field
//	err = client.Start(ctx)    // checks the server and tables, starts the workers
//	defer client.Stop(ctx)     // stops claiming, lets rows in flight commit
//
// [Client.Add] reports what is wrong with a declaration: an empty name, a
// nil query or handler, a negative setting, a model that is not a struct
// or has no primary key, a name already used on the client, a queue
// already added to another client. [Client.Start] proves that the server
// skips locked rows, checks the queues' tables and the pool's size, and
// warns about query plans that read far more rows than they return.
// [Client.Stop] stops claiming and waits for the transactions in flight;
// when its context ends first, their transactions roll back, their rows
// return to the queue, and Stop reports the context's error. Stop may be
// called more than once, and before Start; a client runs once: Start
// after Stop returns [ErrStopped]. Without Start, [Queue.ProcessNext]
// processes one row in the calling goroutine and [Queue.Count] counts
// waiting rows: they suit tests and cron-style programs.
//
// # Failures
//
// A handler's error or panic (a [PanicError]) undoes its writes, rolled
// back to the row's savepoint, and calls [QueueConfig.OnError] while the
// row is still locked: that is where a failure is recorded on the row (an
// attempts count, a retry_at in the future, a failed status), committing
// with the batch. A failure not recorded that way leaves the row in the
// queue, and this process leaves it alone for a cooldown that doubles on
// each failure. [QueueConfig.Timeout] bounds each handler call; a handler
// hung in SQL has its server session ended so that its rows are released.
// Deadlocks and lock wait timeouts roll the transaction back and run it
// again, so a handler may run again on the same row. A row's failure is an
// [ItemError]: [Queue.ProcessNext] returns it, and a started client's
// workers log it to [Config.Logger]. A job's failed attempt is logged with
// the job's id, kind, attempt and MaxAttempts: a WARN "bunqueue: job
// failed, will retry" with retry_in, or an ERROR "bunqueue: job failed for
// good, moved to the failed jobs".
//
// # Jobs
//
// Work that has no row of its own goes in the jobs table, created by
// [Migrate] (or, on MySQL and MariaDB, the SQL of [MigrationSQL]). A job's
// arguments are a type that implements [JobArgs]; [AddWorker] registers a
// [Worker] (or a [WorkerFunc]) for its kind; [Client.Enqueue] inserts a
// job through a [bun.IDB], so that a job enqueued through the
// application's transaction exists if and only if that transaction
// commits. [EnqueueOpts] set the queue, priority, schedule, attempts, a
// unique key and metadata.
//
// A worker's nil completes the job; [Snooze] runs it again later without
// using an attempt; [Cancel] fails it at once; any other error or a panic
// retries it after [Config.Backoff] until its attempts run out, then moves
// it to the failed jobs, which [Client.FailedJobs], [Client.RetryFailed]
// and [Client.DeleteFailed] read and act on. In [ModeLock], the default, a
// job runs inside the transaction that locks it and completes there; in
// [ModeLease] a short transaction leases it, the worker runs outside any
// transaction and heartbeats extend the lease (see [JobQueueConfig]).
//
// [Client.JobGet] and [Client.JobList] read a job in any [JobState], a
// failed one too; [Client.JobCancel], [Client.JobDelete] and
// [Client.JobRunNow] act on one, each with a Tx form. A worker keeps its
// result with [RecordOutput], read back in [JobRecord].Output.
//
// [Client.EnqueueWorkflow] enqueues a group of jobs where a job may wait
// for others ([WorkflowJob], [Dependency]): a dependent is blocked until
// its dependencies completed, released by the transaction that completes
// the last one, and reads their outputs with [DependencyOutputs].
// [EnqueueOpts].Sequence puts a job in a sequence: the jobs of a key run
// one at a time, in enqueue order, each released by the completion of
// the one before it; a head that fails for good holds its key
// ([DependencyHold]) until it is retried or deleted.
//
// # Periodic jobs
//
// [Config.PeriodicJobs] lists jobs that a client enqueues on a schedule
// while it runs: a [PeriodicJob] has a cron expression, read in an
// explicit time zone (UTC by default), or a fixed interval. Every
// process that lists a schedule keeps it, and each tick is enqueued
// once, by the client that moves the schedule's record on, due by the
// database clock; ticks missed while no process ran are enqueued within
// [PeriodicJob.CatchUp], the older ones skipped.
//
// # Tracing and hooks
//
// A client makes OpenTelemetry spans and metrics through
// [Config.TracerProvider] and [Config.MeterProvider] (the otel globals when
// nil): a PRODUCER span "send {queue}" per Enqueue, whose context is
// stored with the job (through a bun.Tx and a DB with [Client.QueryHook],
// it ends with the transaction, marked rolled_back by a ROLLBACK), and a
// CONSUMER span "process {queue}" per claim transaction, started before
// BEGIN so that SQL spans nest under it.
// [Client.QueryHook] wakes this process's workers when a transaction that
// wrote to a watched table commits; on PostgreSQL, [Config.Listener] wakes
// them for the jobs that other processes enqueue (MySQL, MariaDB and
// SQLite poll). Lifecycle hooks ([Hook], with its WorkBegin and WorkEnd
// functions) run around every handler and worker.
//
// # Guarantees
//
//   - At least once: a row stays in its queue until a transaction that
//     takes it out commits.
//   - Never two workers on one row at a time, across processes, for as
//     long as the worker's connection lives.
//   - Database writes made through the item's tx happen exactly once,
//     together with the change that takes the row out of the queue.
//   - External effects (an email, an HTTP call) can happen more than once:
//     make them idempotent.
//
// # Operating
//
// [Client.Stats] and [Client.RecentFailures] report each queue's state in
// this process, and [Client.History] its last hour a minute at a time,
// with, for a jobs queue, how long the jobs it started had been due.
// [Client.Processes] lists every process that runs queues on the
// database, and [Client.FleetHistory] the whole fleet's last hour by the
// minute and last day by the quarter hour, which every started client
// adds to with its heartbeat. Package github.com/bunqueue/bunqueue/dashboard serves them,
// and the failed jobs, as an http.Handler to mount behind the
// application's own authentication; the command
// github.com/bunqueue/bunqueue/cmd/bunqueue migrates, reports and manages
// failed jobs, and github.com/bunqueue/bunqueue/cmd/bunqueue-bench
// measures throughput.
package bunqueue
