package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type succeededItem struct {
	bun.BaseModel `bun:"table:bq_test_dash_succeeded"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// The queue page marks a failing row that this process completed after
// its latest failure ("succeeded later"), and not one that keeps
// failing; data.json gives the failure's succeeded_at.
func TestQueuePageSucceededLater(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	const table = "bq_test_dash_succeeded"
	dbtest.Exec(t, db, "DROP TABLE IF EXISTS "+table)
	dbtest.Exec(t, db, "CREATE TABLE "+table+" (id BIGINT PRIMARY KEY, done BOOL NOT NULL DEFAULT FALSE)")
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	dbtest.Exec(t, db, "INSERT INTO "+table+" (id) VALUES (1), (2)")

	queue := dbtest.Name("dash_succeeded")
	var mu sync.Mutex
	runs := map[int64]int{}
	c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Add(bunqueue.NewQueue(queue,
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, it *succeededItem) error {
			mu.Lock()
			runs[it.ID]++
			n := runs[it.ID]
			mu.Unlock()
			if it.ID == 2 || n == 1 {
				return fmt.Errorf("row %d: run %d fails", it.ID, n)
			}
			_, err := tx.NewUpdate().Model(it).Set("done = TRUE").WherePK().Exec(ctx)
			return err
		}, &bunqueue.QueueConfig[succeededItem]{Cooldown: 20 * time.Millisecond})))
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	require.Eventually(t, func() bool {
		var one, two bool
		for _, f := range c.RecentFailures() {
			one = one || (f.Key == "id=1" && !f.SucceededAt.IsZero())
			two = two || f.Key == "id=2"
		}
		return one && two
	}, 20*time.Second, 20*time.Millisecond, "row 1 failed then completed, row 2 failed")

	h := dashboard.New(c, nil)
	res, page := get(t, h, "/queue?name="+queue)
	require.Equal(t, http.StatusOK, res.StatusCode)
	failing := regexp.MustCompile(`(?s)<section id="failing">.*?</section>`).FindString(page)
	require.NotEmpty(t, failing)
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr data-key="([^"]+)"[^>]*>.*?</tr>`).FindAllStringSubmatch(failing, -1) {
		rows[m[1]] = m[0]
	}
	require.Len(t, rows, 2)
	require.Contains(t, rows["id=1"], `<tr data-key="id=1" data-succeeded>`)
	require.Regexp(t, `<span class="state state-completed succeeded" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">succeeded later, \d+s ago</span>`, rows["id=1"])
	require.Contains(t, rows["id=2"], `<tr data-key="id=2">`)
	require.NotContains(t, rows["id=2"], "succeeded")

	_, body := get(t, h, "/data.json")
	var data struct {
		Recent []map[string]any `json:"recent_failures"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &data))
	var marked, unmarked int
	for _, f := range data.Recent {
		switch f["key"] {
		case "id=1":
			require.NotEmpty(t, f["succeeded_at"])
			marked++
		case "id=2":
			require.NotContains(t, f, "succeeded_at", "a zero time is left out")
			unmarked++
		}
	}
	require.Equal(t, 1, marked)
	require.NotZero(t, unmarked)
}
