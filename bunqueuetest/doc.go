// Package bunqueuetest helps test code that enqueues and works bunqueue
// jobs, against a real database (MySQL 8 / MariaDB 10.6+, PostgreSQL or
// SQLite), as the app runs on.
//
// # Was the job enqueued?
//
// [RequireEnqueued] checks that exactly one pending job (waiting,
// scheduled, running or waiting for a retry) of the kind of its args
// matches, and returns it: every field of the args given that is not its
// zero value must equal the job's, and the options given
// ([RequireEnqueuedOpts]: queue, priority, unique key, metadata, run
// time, max attempts) must match. [RequireNotEnqueued] checks that none
// does. Their Tx variants read through a transaction, and so see the jobs
// it enqueued before it commits. A check that fails ends the test with a
// message that lists the pending jobs of the kind and how each differs,
// or, when there are none, the kinds that are pending. The checks read
// every pending job of the kind, other tests' included: on a database
// that tests share, give each test a jobs queue of its own and name it in
// RequireEnqueuedOpts.Queue.
//
//	job := bunqueuetest.RequireEnqueued(ctx, t, db, WelcomeEmail{UserID: user.ID},
//		&bunqueuetest.RequireEnqueuedOpts{Queue: "emails"})
//
// # Working a job in a test
//
// [WorkJob] runs one pending job, and [Work] enqueues one and runs it,
// in the calling goroutine, through the path the client's workers take:
// claimed in the job queue's mode, worked by the worker added with
// bunqueue.AddWorker (in lock mode inside the claim transaction, so that
// its writes commit with the completion), with the queue's hooks and
// Timeout, then completed, retried with backoff, snoozed or moved to the
// failed jobs as in production. The [WorkResult] says which. The client
// need not be started, and is better not: its own workers might take the
// job first.
//
//	res := bunqueuetest.WorkJob(ctx, t, client, job.ID)
//	if res.Outcome != bunqueuetest.Completed {
//		t.Fatalf("welcome email: %s: %v", res.Outcome, res.Err)
//	}
package bunqueuetest
