package bunqueue_test

import (
	"context"
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

// The tests of this file check what a queue's query may contain (issue 17,
// item 5): clauses the engine cannot run are refused at Add, naming the
// queue and the clause; a query the server refuses fails Start; the
// clauses a queue may use work.

// hqRow is a row of the tables of these tests (and idle_test.go's), whose
// columns are hqColumns.
type hqRow struct {
	ID     int64 `bun:",pk"`
	Kind   string
	Status string
}

const hqColumns = "id BIGINT PRIMARY KEY, kind VARCHAR(8) NOT NULL, status VARCHAR(16) NOT NULL"

type hqItem struct {
	bun.BaseModel `bun:"table:bq_hq_item"`
	hqRow
}

type hqAllowed struct {
	bun.BaseModel `bun:"table:bq_hq_allowed"`
	hqRow
}

type hqCooled struct {
	bun.BaseModel `bun:"table:bq_hq_cooled"`
	hqRow
}

type hqBroken struct {
	bun.BaseModel `bun:"table:bq_hq_broken"`
	hqRow
}

type hqOther struct {
	bun.BaseModel `bun:"table:bq_hq_other"`
	ID            int64 `bun:",pk"`
}

// hqTable opens srv and creates table, of hqColumns with an index on
// (status, id), holding rows (the VALUES of id, kind and status).
func hqTable(t *testing.T, srv dbtest.Server, table, rows string) *bun.DB {
	t.Helper()
	db := srv.Open(t, 0)
	srvTable(t, db, table, hqColumns, "status, id")
	dbtest.Exec(t, db, "INSERT INTO "+table+" (id, kind, status) VALUES "+rows)
	return db
}

// hqDone marks an item done.
func hqDone[T any](ctx context.Context, tx bun.Tx, item *T) error {
	_, err := tx.NewUpdate().Model(item).Set("status = 'done'").WherePK().Exec(ctx)
	return err
}

// Add refuses every clause that the engine would replace, run wrong or
// not run at all, with an error that names the queue and the clause; it
// needs no table to tell.
func TestQueueQueryClausesRefusedAtAdd(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := srv.Open(t, 0)
		waiting := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") }
		for _, tc := range []struct {
			name  string
			query bunqueue.QueryFunc
			want  []string
		}{
			{"limit", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Limit(1) }, []string{"LIMIT (SelectQuery.Limit)"}},
			{"offset", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Offset(2) }, []string{"OFFSET (SelectQuery.Offset)", "never be processed"}},
			{"for", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).For("UPDATE") }, []string{"FOR (SelectQuery.For)"}},
			{"limit and for", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Limit(1).For("UPDATE") },
				[]string{"LIMIT (SelectQuery.Limit)", "; nor FOR (SelectQuery.For)"}},
			{"limit offset for", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Limit(5).Offset(2).For("SHARE") },
				[]string{"LIMIT", "OFFSET", "FOR"}},
			{"group", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Group("status") }, []string{"GROUP BY"}},
			{"having", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Having("COUNT(*) > 0") }, []string{"HAVING"}},
			{"distinct", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Distinct() }, []string{"DISTINCT"}},
			{"distinct on", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).DistinctOn("kind") }, []string{"DISTINCT"}},
			{"union", func(q *bun.SelectQuery) *bun.SelectQuery {
				return waiting(q).Union(q.DB().NewSelect().Model((*hqItem)(nil)).Where("kind = 'x'"))
			}, []string{"UNION, INTERSECT or EXCEPT"}},
			{"union all with limit", func(q *bun.SelectQuery) *bun.SelectQuery {
				return waiting(q).Limit(3).UnionAll(q.DB().NewSelect().Model((*hqItem)(nil)))
			}, []string{"LIMIT", "UNION"}},
			{"join", func(q *bun.SelectQuery) *bun.SelectQuery {
				return waiting(q).Join("JOIN bq_hq_other AS o ON o.id = ?TableAlias.id")
			}, []string{"JOIN (SelectQuery.Join, Relation)", "EXISTS"}},
			{"column", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).Column("status") }, []string{"a column list"}},
			{"column expr", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).ColumnExpr("COUNT(*)") }, []string{"a column list"}},
			{"exclude column", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).ExcludeColumn("kind") }, []string{"a column list"}},
			{"table", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).TableExpr("bq_hq_other") }, []string{"another table"}},
			{"model table", func(q *bun.SelectQuery) *bun.SelectQuery {
				return waiting(q).ModelTableExpr("bq_hq_other AS ?TableAlias")
			}, []string{"another table"}},
			{"index hint", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q).UseIndex("bq_hq_item_status") }, []string{"index hints"}},
			{"model", func(q *bun.SelectQuery) *bun.SelectQuery { return waiting(q.Model((*hqOther)(nil))) }, []string{"model"}},
			{"another query", func(q *bun.SelectQuery) *bun.SelectQuery {
				return waiting(q.DB().NewSelect().Model((*hqItem)(nil)))
			}, []string{"must add to the query it is given"}},
			{"error", func(q *bun.SelectQuery) *bun.SelectQuery { return q.Err(errors.New("no such thing")) }, []string{"no such thing"}},
			{"panic", func(*bun.SelectQuery) *bun.SelectQuery { panic("the query function broke") }, []string{"panicked: the query function broke"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.name == "index hint" && srv.Name != "mysql" {
					t.Skip("bun writes index hints for MySQL only: elsewhere the query has none")
				}
				c, err := bunqueue.NewClient(db, &bunqueue.Config{Logger: testLogger(t)})
				require.NoError(t, err)
				err = c.Add(bunqueue.NewQueue("hq-"+strings.ReplaceAll(tc.name, " ", "-"), tc.query, hqDone[hqItem], nil))
				require.Error(t, err)
				t.Log(err)
				require.ErrorContains(t, err, `bunqueue: queue "hq-`+strings.ReplaceAll(tc.name, " ", "-")+`": `)
				for _, w := range tc.want {
					require.ErrorContains(t, err, w)
				}
			})
		}
	})
}

// What a queue's query may contain is accepted, and runs: OR at the top
// of the WHERE, groups, subqueries, a WITH whose table the conditions
// read, ORDER BY expressions and a comment.
func TestQueueQueryAllowedClausesRun(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := hqTable(t, srv, "bq_hq_allowed", "(1, 'a', 'waiting'), (2, 'b', 'waiting'), (3, 'c', 'waiting'), (4, 'd', 'waiting'), (5, 'a', 'done')")
		queues := map[string]bunqueue.QueryFunc{
			"hq-or": func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("status = 'waiting' AND kind = 'a'").WhereOr("status = 'waiting' AND kind = 'b'").Order("id")
			},
			"hq-group": func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("status = 'waiting'").WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
					return q.Where("kind = 'c'").WhereOr("kind = 'z'")
				}).OrderExpr("id DESC").Comment("the c queue")
			},
			"hq-with": func(q *bun.SelectQuery) *bun.SelectQuery {
				kinds := q.DB().NewSelect().ColumnExpr("'d' AS kind")
				return q.With("hq_kinds", kinds).
					Where("status = 'waiting'").
					Where("kind IN (SELECT kind FROM hq_kinds)").
					Order("id")
			},
		}
		c, log := planClient(t, db, bunqueue.Config{})
		for name, query := range queues {
			require.NoError(t, c.Add(bunqueue.NewQueue(name, query, hqDone[hqAllowed], nil)), name)
		}
		start(t, c)
		done := func(n int) func() bool {
			return func() bool { return count(t, db, "SELECT COUNT(*) FROM bq_hq_allowed WHERE status = 'done'") == n }
		}
		eventually(t, 20*time.Second, done(5), "every waiting row is processed")
		// Idle now: the idle probe, which holds every queue's query in one
		// statement, finds rows committed without a wake-up.
		time.Sleep(200 * time.Millisecond)
		dbtest.Exec(t, db, "INSERT INTO bq_hq_allowed (id, kind, status) VALUES (6, 'a', 'waiting'), (7, 'c', 'waiting'), (8, 'd', 'waiting')")
		eventually(t, 20*time.Second, done(8), "the rows committed later are processed")
		_, all := log.warnings(t, "")
		require.NotContains(t, all, "probing the idle queues failed")
		require.NotContains(t, all, `"level":"ERROR"`)
	})
}

// A query whose conditions are joined by OR at the top of its WHERE
// still leaves out the rows that this process cools down (and claims only
// the keys it was given): the engine's conditions bind to all of the
// query's. A row its handler leaves in the queue runs once, then cools
// down, instead of running at every read.
func TestQueueQueryWhereOrKeepsCooldown(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := hqTable(t, srv, "bq_hq_cooled", "(1, 'a', 'waiting'), (2, 'b', 'waiting'), (3, 'b', 'waiting')")
		var mu sync.Mutex
		runs := map[int64]int{}
		q := bunqueue.NewQueue("hq-cooled", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("status = 'waiting' AND kind = 'a'").WhereOr("status = 'waiting' AND kind = 'b'").Order("id")
		}, func(ctx context.Context, tx bun.Tx, it *hqCooled) error {
			mu.Lock()
			runs[it.ID]++
			mu.Unlock()
			if it.ID == 1 {
				return nil // leaves the row in the queue: it must cool down
			}
			return hqDone(ctx, tx, it)
		}, &bunqueue.QueueConfig[hqCooled]{Workers: 2, BatchSize: 1, Cooldown: time.Minute})
		c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}) // one ErrStillQueued per run of row 1
		require.NoError(t, err)
		require.NoError(t, c.Add(q))
		start(t, c)
		eventually(t, 20*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_hq_cooled WHERE status = 'done'") == 2
		}, "rows 2 and 3 are processed")
		time.Sleep(30 * 20 * time.Millisecond) // some thirty polls
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int64]int{1: 1, 2: 1, 3: 1}, runs, "row 1 ran once, then cooled down")
	})
}

// A query the server refuses (an unknown column) fails Start with the
// server's error, naming the queue, whether or not StrictQueryPlans is
// set, instead of failing at every read; nothing runs. Fixed, the same
// client starts.
func TestQueueQueryRefusedByServerFailsStart(t *testing.T) {
	onServers(t, func(t *testing.T, srv dbtest.Server) {
		db := hqTable(t, srv, "bq_hq_broken", "(1, 'a', 'waiting')")
		query := func(where string) bunqueue.QueryFunc {
			return func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where(where).Order("id") }
		}
		for _, strict := range []bool{false, true} {
			c, log := planClient(t, db, bunqueue.Config{StrictQueryPlans: strict}, bunqueue.NewQueue("hq-broken", query("no_such_column = 'waiting'"), hqDone[hqBroken], nil))
			err := c.Start(t.Context())
			require.Error(t, err, "strict %v", strict)
			t.Log(err)
			require.ErrorContains(t, err, `bunqueue: queue "hq-broken": the server refuses its query: `)
			require.ErrorContains(t, err, "no_such_column")
			_, all := log.warnings(t, "hq-broken")
			require.NotContains(t, all, "ERROR", "nothing ran to fail")
			require.NoError(t, c.Stop(t.Context()))
		}
		require.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM bq_hq_broken WHERE status = 'waiting'"), "nothing ran")

		c, _ := planClient(t, db, bunqueue.Config{}, bunqueue.NewQueue("hq-broken", query("status = 'waiting'"), hqDone[hqBroken], nil))
		start(t, c)
		eventually(t, 20*time.Second, func() bool {
			return count(t, db, "SELECT COUNT(*) FROM bq_hq_broken WHERE status = 'done'") == 1
		}, "the fixed query runs")
	})
}
