package bunqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// logRecords is a JSON logger's output, line by line, that the test can
// read while the client writes; it goes to the test log too.
type logRecords struct {
	t    *testing.T
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func newLogRecords(t *testing.T) (*slog.Logger, *logRecords) {
	r := &logRecords{t: t}
	t.Cleanup(func() { r.mu.Lock(); r.done = true; r.mu.Unlock() })
	return slog.New(slog.NewJSONHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug})), r
}

func (r *logRecords) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(p)
	if !r.done {
		r.t.Log(string(bytes.TrimSpace(p)))
	}
	return len(p), nil
}

// where returns the records that have every key and value of want
// (values as JSON decodes them: numbers, durations in nanoseconds too,
// are float64).
func (r *logRecords) where(want map[string]any) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && rec[k] == v
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out
}

type logJobArgs struct {
	Do string `json:"do"` // fail, panic, cancel or snooze
}

func (logJobArgs) Kind() string { return "log_test_job" }

// A job's failure is logged with its queue, id, kind, attempt and most
// attempts, and what became of it: a retry is a WARN that says when, a
// failure for good an ERROR, a snooze an INFO; each says so in its
// message. In both modes, on every server.
func TestJobFailureLogLines(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		require.NoError(t, bunqueue.Migrate(t.Context(), db))
		for _, mode := range []bunqueue.JobMode{bunqueue.ModeLock, bunqueue.ModeLease} {
			name := map[bunqueue.JobMode]string{bunqueue.ModeLock: "lock", bunqueue.ModeLease: "lease"}[mode]
			t.Run(name, func(t *testing.T) {
				queue := dbtest.Name("logq")
				t.Cleanup(func() {
					_, _ = db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)
					_, _ = db.Exec("DELETE FROM bunqueue_failed_jobs WHERE queue = ?", queue)
				})
				log, records := newLogRecords(t)
				c, err := bunqueue.NewClient(db, &bunqueue.Config{
					Logger: log, PollInterval: 50 * time.Millisecond,
					Backoff:   func(int) time.Duration { return 100 * time.Millisecond },
					JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1, Mode: mode}},
				})
				require.NoError(t, err)
				require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[logJobArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[logJobArgs]) error {
					switch job.Args.Do {
					case "panic":
						panic("kaboom")
					case "cancel":
						return bunqueue.Cancel(errors.New("bad input"))
					case "snooze":
						return bunqueue.Snooze(time.Hour)
					}
					return errors.New("smtp: 451 try later")
				})))
				ids := map[string]float64{}
				for _, do := range []string{"fail", "panic", "cancel", "snooze"} {
					res, err := c.Enqueue(t.Context(), db, logJobArgs{Do: do}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 2})
					require.NoError(t, err)
					ids[do] = float64(res.ID)
				}
				start(t, c)
				job := func(do string, more map[string]any) map[string]any {
					m := map[string]any{"queue": queue, "job_id": ids[do], "kind": "log_test_job", "max_attempts": float64(2)}
					for k, v := range more {
						m[k] = v
					}
					return m
				}
				retried := map[string]any{"level": "WARN", "msg": "bunqueue: job failed, will retry", "outcome": "retried", "attempt": float64(1), "retry_in": float64(100 * time.Millisecond)}
				failed := map[string]any{"level": "ERROR", "msg": "bunqueue: job failed for good, moved to the failed jobs", "outcome": "failed", "attempt": float64(2)}
				want := []map[string]any{
					job("fail", retried), job("fail", failed), job("panic", retried), job("panic", failed),
					job("cancel", map[string]any{"level": "ERROR", "msg": "bunqueue: job failed for good, moved to the failed jobs", "outcome": "cancelled", "attempt": float64(1)}),
					job("snooze", map[string]any{"level": "INFO", "msg": "bunqueue: job snoozed", "outcome": "snoozed", "attempt": float64(1), "retry_in": float64(time.Hour)}),
				}
				eventually(t, 15*time.Second, func() bool {
					for _, w := range want {
						if len(records.where(w)) != 1 {
							return false
						}
					}
					return true
				}, "a line per failed attempt")
				require.Equal(t, "smtp: 451 try later", records.where(job("fail", retried))[0]["error"])
				require.Equal(t, "bunqueue: handler panicked: kaboom", records.where(job("panic", failed))[0]["error"])
				require.Equal(t, "bunqueue: job cancelled: bad input", records.where(job("cancel", nil))[0]["error"])
				// The line's error is the job's as stored (a panic's
				// stack follows it there).
				for _, do := range []string{"panic", "cancel"} {
					f, ok := failedByJobID(t, db, int64(ids[do]))
					require.True(t, ok)
					require.True(t, strings.HasPrefix(f.Error, records.where(job(do, map[string]any{"level": "ERROR"}))[0]["error"].(string)), "%s: %q", do, f.Error)
				}
				f, _ := failedByJobID(t, db, int64(ids["cancel"]))
				require.Equal(t, "bunqueue: job cancelled: bad input", f.Error)
				require.Empty(t, records.where(map[string]any{"msg": "bunqueue: item failed"}), "no job's failure is logged as a row's")
			})
		}
	})
}

type logRow struct {
	bun.BaseModel `bun:"table:bq_log_row"`
	ID            int64 `bun:",pk"`
	Grp           string
	Status        string
}

// A row's failure that OnError recorded is an INFO line (the app
// expected it, and wrote what became of it); one it did not record, an
// ERROR. QueueConfig.LogLevel drops a queue's lines below it: at WARN,
// the recorded failures go, the others stay. On every server.
func TestRowFailureLogLevels(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		const table = "bq_log_row"
		srvTable(t, db, table, "id BIGINT NOT NULL PRIMARY KEY, grp VARCHAR(10) NOT NULL, status VARCHAR(20) NOT NULL")
		log, records := newLogRecords(t)
		c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: log, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		queue := func(grp string, level slog.Leveler) string {
			name := dbtest.Name("logrows_" + grp)
			q := bunqueue.NewQueue(name,
				func(q *bun.SelectQuery) *bun.SelectQuery {
					return q.Where("grp = ?", grp).Where("status = 'waiting'").Order("id")
				},
				func(ctx context.Context, tx bun.Tx, r *logRow) error {
					if r.ID%2 == 0 {
						return errors.New("declined: an expected outcome")
					}
					return errors.New("boom")
				},
				&bunqueue.QueueConfig[logRow]{Workers: 1, Cooldown: time.Hour, LogLevel: level,
					OnError: func(ctx context.Context, tx bun.Tx, r *logRow, cause error) error {
						if r.ID%2 != 0 {
							return errors.New("cannot record this one")
						}
						_, err := tx.NewUpdate().Model(r).Set("status = 'declined'").WherePK().Exec(ctx)
						return err
					}})
			require.NoError(t, c.Add(q))
			return name
		}
		loud, quiet := queue("loud", nil), queue("quiet", slog.LevelWarn)
		dbtest.Exec(t, db, "INSERT INTO "+table+" (id, grp, status) VALUES (1, 'loud', 'waiting'), (2, 'loud', 'waiting'), (3, 'quiet', 'waiting'), (4, 'quiet', 'waiting')")
		start(t, c)
		line := func(queue, level string) map[string]any {
			return map[string]any{"queue": queue, "level": level, "msg": "bunqueue: item failed"}
		}
		eventually(t, 15*time.Second, func() bool {
			return len(records.where(line(loud, "INFO"))) == 1 && len(records.where(line(loud, "ERROR"))) == 1 &&
				len(records.where(line(quiet, "ERROR"))) == 1 &&
				count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE status = 'declined'") == 2
		}, "each queue's rows fail once")
		require.NoError(t, c.Stop(t.Context())) // the workers have logged what they will
		require.Contains(t, records.where(line(loud, "INFO"))[0]["error"], "row id=2: declined")
		require.Contains(t, records.where(line(loud, "ERROR"))[0]["error"], "row id=1: boom")
		require.Contains(t, records.where(line(quiet, "ERROR"))[0]["error"], "row id=3: boom")
		require.Empty(t, records.where(map[string]any{"queue": quiet, "level": "INFO"}), "the quiet queue's LogLevel drops the recorded failure")
		require.Empty(t, records.where(map[string]any{"msg": "bunqueue: item failed", "level": "WARN"}), "no failure is a WARN")
	})
}

// JobQueueConfig.LogLevel drops a jobs queue's lines below it: at ERROR,
// a job's retries (WARN) and snoozes (INFO) are not logged, its failure
// for good is.
func TestJobLogLevel(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	queue := ownJobQueue(t, db)
	log, records := newLogRecords(t)
	c := jobsTestClient(t, db, bunqueue.Config{Logger: log, Backoff: fastBackoff,
		JobQueues: map[string]bunqueue.JobQueueConfig{queue: {Workers: 1, LogLevel: slog.LevelError}}})
	require.NoError(t, bunqueue.AddWorker(c, bunqueue.WorkerFunc[logJobArgs](func(ctx context.Context, db bun.IDB, job *bunqueue.Job[logJobArgs]) error {
		if job.Args.Do == "snooze" {
			return bunqueue.Snooze(time.Hour)
		}
		return errors.New("smtp: 451 try later")
	})))
	failing := enqueueOne(t, c, db, logJobArgs{Do: "fail"}, &bunqueue.EnqueueOpts{Queue: queue, MaxAttempts: 3})
	snoozed := enqueueOne(t, c, db, logJobArgs{Do: "snooze"}, &bunqueue.EnqueueOpts{Queue: queue})
	start(t, c)
	waitFailed(t, db, failing, 15*time.Second)
	eventually(t, 10*time.Second, func() bool {
		return len(records.where(map[string]any{"queue": queue, "job_id": float64(failing), "level": "ERROR"})) == 1 &&
			count(t, db, "SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ? AND run_at > "+nowSQL(db), snoozed) == 1
	}, "the failure for good is logged, the snooze recorded")
	require.NoError(t, c.Stop(t.Context())) // the workers have logged what they will
	require.Empty(t, records.where(map[string]any{"queue": queue, "level": "WARN"}), "no retry line")
	require.Empty(t, records.where(map[string]any{"queue": queue, "level": "INFO"}), "no snooze line")
}
