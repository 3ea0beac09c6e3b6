package bunqueue_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The tests of this file check what an idle client costs (issue 17, item
// 9): no new connection once it runs, and statements per poll that do not
// grow with its number of queues.

// counting is a pool that counts the connections it opens and keeps the
// statements run through its bun.DB.
type counting struct {
	*bun.DB
	conns atomic.Int64
	mu    sync.Mutex
	stmts []string
}

// dsnConnector opens connections of d on dsn.
type dsnConnector struct {
	dsn string
	d   driver.Driver
	n   *atomic.Int64
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) {
	c.n.Add(1)
	return c.d.Open(c.dsn)
}

func (c dsnConnector) Driver() driver.Driver { return c.d }

func (p *counting) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (p *counting) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	p.mu.Lock()
	p.stmts = append(p.stmts, e.Query)
	p.mu.Unlock()
}

// at returns how many connections the pool has opened and statements it
// has run.
func (p *counting) at() (conns int64, stmts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns.Load(), len(p.stmts)
}

// since returns the statements run since the pool had run n.
func (p *counting) since(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stmts[n:]...)
}

// idleServer opens, on srv, a pool for the test's own statements, and
// returns what opens counting pools over the same database.
func idleServer(t *testing.T, srv dbtest.Server) (*bun.DB, func() *counting) {
	t.Helper()
	var name, dsn string
	var d schema.Dialect
	var admin *bun.DB
	switch srv.Name {
	case "mysql":
		name, dsn, d, admin = "mysql", dbtest.DSN(), mysqldialect.New(), srv.Open(t, 0)
	case "postgres":
		name, dsn, d, admin = "pgx", dbtest.PGDSN(), pgdialect.New(), srv.Open(t, 0)
	default:
		path := filepath.Join(t.TempDir(), "idle.db")
		name, dsn, d, admin = "sqlite", dbtest.SQLiteDSN(path), sqlitedialect.New(), dbtest.OpenSQLiteFile(t, path, 0)
	}
	return admin, func() *counting {
		opened, err := sql.Open(name, dsn)
		require.NoError(t, err)
		p := &counting{}
		sqldb := sql.OpenDB(dsnConnector{dsn: dsn, d: opened.Driver(), n: &p.conns})
		_ = opened.Close()
		sqldb.SetMaxIdleConns(8)
		p.DB = bun.NewDB(sqldb, d).WithQueryHook(p)
		t.Cleanup(func() { _ = p.DB.Close() })
		return p
	}
}

// probeComment tags the statement that probes a client's idle queues.
const probeComment = "bunqueue: probe idle queues"

// The tables of the tests, one each: they run in parallel.
type (
	idleCostItem struct {
		bun.BaseModel `bun:"table:bq_idle_cost"`
		hqRow
	}
	idleCoolItem struct {
		bun.BaseModel `bun:"table:bq_idle_cool"`
		hqRow
	}
	idlePollItem struct {
		bun.BaseModel `bun:"table:bq_idle_poll"`
		hqRow
	}
)

// idleQueue is a queue of the waiting rows of one kind, whose handler
// marks them done, or calls handle first if it is not nil.
func idleQueue[T any](kind string, cfg *bunqueue.QueueConfig[T], handle func(*T) bool) *bunqueue.Queue[T] {
	return bunqueue.NewQueue("idle-"+kind, func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("status = 'waiting'").Where("kind = ?", kind).Order("id")
	}, func(ctx context.Context, tx bun.Tx, it *T) error {
		if handle != nil && !handle(it) {
			return nil // leaves the row in the queue
		}
		return hqDone(ctx, tx, it)
	}, cfg)
}

// settle waits until the feed of each queue idle-<kind> has read once,
// then for three more poll intervals, in which the feeds let their
// connections go.
func (p *counting) settle(t *testing.T, poll time.Duration, kinds ...string) {
	t.Helper()
	eventually(t, 30*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, kind := range kinds {
			if !slices.ContainsFunc(p.stmts, func(q string) bool { return strings.Contains(q, "bunqueue: read idle-"+kind+" ") }) {
				return false
			}
		}
		return true
	}, "every queue's feed reads once")
	time.Sleep(3 * poll)
}

// idleClient starts a client over p with the queues and a poll of poll.
func idleClient(t *testing.T, p *counting, poll time.Duration, queues ...bunqueue.AnyQueue) {
	t.Helper()
	c, err := bunqueue.NewClient(p.DB, &bunqueue.Config{PollInterval: poll, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, c.Add(q))
	}
	start(t, c)
}

// An idle client opens no connection once it runs: its queues' feeds let
// theirs go and the probe of its idle queues keeps one (MySQL) or reuses
// the pool's (PostgreSQL, SQLite). It runs as many statements with four
// idle queues as with one, measured side by side over the same time.
func TestIdleClientCost(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		admin, open := idleServer(t, srv)
		one, four := open(), open()
		srvTable(t, admin, "bq_idle_cost", hqColumns, "status, kind, id")
		const poll = 100 * time.Millisecond
		q := func(kind string) *bunqueue.Queue[idleCostItem] { return idleQueue[idleCostItem](kind, nil, nil) }
		idleClient(t, one, poll, q("a"))
		idleClient(t, four, poll, q("b"), q("c"), q("d"), q("e"))

		one.settle(t, poll, "a")
		four.settle(t, poll, "b", "c", "d", "e")
		conns1, stmts1 := one.at()
		conns4, stmts4 := four.at()
		time.Sleep(30 * poll)
		c1, s1 := one.at()
		c4, s4 := four.at()
		t.Logf("%s: over 30 polls, one idle queue: %d connections opened, %d statements; four: %d connections, %d statements",
			srv.Name, c1-conns1, s1-stmts1, c4-conns4, s4-stmts4)
		for _, q := range four.since(stmts4)[:min(3, s4-stmts4)] {
			t.Logf("a statement of the client of four queues: %s", q)
		}
		require.Zero(t, c4-conns4, "the client of four idle queues opened connections")
		require.Zero(t, c1-conns1, "the client of one idle queue opened connections")
		require.Positive(t, s1-stmts1, "the client of one idle queue polls")
		require.LessOrEqual(t, s4-stmts4, (s1-stmts1)*3/2+2, "four idle queues cost more statements than one")

		// Idle, it still finds rows that another client commits (without
		// the wake-up hook), in each of its queues.
		dbtest.Exec(t, admin, "INSERT INTO bq_idle_cost (id, kind, status) VALUES (1, 'a', 'waiting'), (2, 'b', 'waiting'), (3, 'c', 'waiting'), (4, 'd', 'waiting'), (5, 'e', 'waiting')")
		eventually(t, 20*time.Second, func() bool {
			return count(t, admin, "SELECT COUNT(*) FROM bq_idle_cost WHERE status = 'done'") == 5
		}, "the rows committed elsewhere are found by polling")
	})
}

// A row that its handler leaves in the queue cools down without making
// its idle queue read: the probe leaves it out until its wait ends.
func TestIdleCoolingRowDoesNotWakeItsQueue(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		admin, open := idleServer(t, srv)
		p := open()
		srvTable(t, admin, "bq_idle_cool", hqColumns, "status, kind, id")
		dbtest.Exec(t, admin, "INSERT INTO bq_idle_cool (id, kind, status) VALUES (1, 'x', 'waiting')")
		var runs atomic.Int64
		const poll = 50 * time.Millisecond
		idleClient(t, p, poll, idleQueue("x", &bunqueue.QueueConfig[idleCoolItem]{Cooldown: time.Minute}, func(*idleCoolItem) bool {
			runs.Add(1)
			return false
		}))
		eventually(t, 20*time.Second, func() bool { return runs.Load() == 1 }, "the row runs")
		_, ran := p.at()
		from := 0
		eventually(t, 20*time.Second, func() bool {
			i := slices.IndexFunc(p.since(ran), func(q string) bool { return strings.Contains(q, probeComment) })
			from = ran + i + 1
			return i >= 0
		}, "the queue, idle once its row cools down, is probed, and does not read for itself")
		time.Sleep(30 * poll)
		reads, probes := 0, 0
		for _, q := range p.since(from) {
			switch {
			case strings.Contains(q, "bunqueue: read idle-x"):
				reads++
			case strings.Contains(q, probeComment):
				probes++
			}
		}
		t.Logf("%s: over 30 polls: %d reads of the queue, %d probes", srv.Name, reads, probes)
		require.Zero(t, reads, "the queue read while its only row was cooling down")
		require.Positive(t, probes, "the idle queue is probed")
		require.Equal(t, int64(1), runs.Load(), "the row ran once")
	})
}

// Queues with different poll intervals are probed each at its own: the
// one of a ten times longer interval, about ten times less often.
func TestIdleProbeKeepsEachPollInterval(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		admin, open := idleServer(t, srv)
		p := open()
		srvTable(t, admin, "bq_idle_poll", hqColumns, "status, kind, id")
		const fast, slow = 40 * time.Millisecond, 400 * time.Millisecond
		idleClient(t, p, fast,
			idleQueue[idlePollItem]("f", nil, nil),
			idleQueue("s", &bunqueue.QueueConfig[idlePollItem]{PollInterval: slow}, nil))
		p.settle(t, slow, "f", "s")
		_, from := p.at()
		time.Sleep(5 * slow)
		probes := map[string]int{}
		for _, q := range p.since(from) {
			for _, kind := range []string{"f", "s"} {
				if strings.Contains(q, fmt.Sprintf("kind = '%s'", kind)) {
					probes[kind]++
				}
			}
		}
		t.Logf("%s: statements that read the queue of poll %s: %d; of poll %s: %d", srv.Name, fast, probes["f"], slow, probes["s"])
		require.Positive(t, probes["s"], "the slow queue is probed")
		require.Greater(t, probes["f"], 3*probes["s"], "the fast queue is probed more often")
	})
}
