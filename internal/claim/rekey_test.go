package claim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

func TestAssignedKey(t *testing.T) {
	pks := []string{"id"}
	for _, tc := range []struct{ query, want string }{
		{"UPDATE orders SET id = 5 WHERE id = 4", "id"},
		{"UPDATE `orders` AS `o` SET `o`.`status` = 'x', `o`.`id` = 5 WHERE (`o`.`id` = 4)", "id"},
		{`UPDATE "orders" AS "o" SET "id" = "o"."id" + 1 WHERE ("o"."id" = 4)`, "id"},
		{"update app.orders set ID = 5", "id"},
		{"UPDATE orders JOIN lines ON lines.order_id = orders.id SET orders.id = 9", "id"},
		{"/* c */ UPDATE IGNORE orders SET note = (SELECT id FROM x), id = 1", "id"},
		{"UPDATE orders SET status = 'done' WHERE id = 4", ""},
		{"UPDATE orders SET note = 'id = 5' WHERE id = 4", ""},
		{"UPDATE orders SET status = (SELECT id FROM t) WHERE id = 4", ""},
		{"UPDATE other SET id = 5", ""},
		{"UPDATE orders SET status = 'x' FROM t WHERE t.id = orders.id", ""},
		{"DELETE FROM orders WHERE id = 4", ""},
		{"INSERT INTO orders (id) VALUES (5)", ""},
		{"WITH x AS (SELECT 1) UPDATE orders SET id = 2", "id"},
	} {
		require.Equal(t, tc.want, assignedKey(tc.query, "orders", pks), tc.query)
	}
}

func BenchmarkRekeyHook(b *testing.B) {
	ctx := context.Background()
	w := &rekeyWatch{rekeyTarget: &rekeyTarget{table: "orders", pks: []string{"id"}}}
	handler := context.WithValue(ctx, rekeyKey{}, w)
	for _, bc := range []struct {
		name  string
		ctx   context.Context
		query string
	}{
		{"engine statement", ctx, "SELECT `o`.`id` FROM `orders` AS `o` WHERE status = 'waiting' AND id IN (1,2,3) FOR UPDATE SKIP LOCKED"},
		{"handler select", handler, "SELECT `o`.`id` FROM `orders` AS `o` WHERE id = 1"},
		{"handler update", handler, "UPDATE `orders` AS `o` SET `status` = 'sent', `sent_at` = '2026-12-02 17:00:00' WHERE (`o`.`id` = 1)"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := &bun.QueryEvent{Query: bc.query}
			for b.Loop() {
				RekeyHook{}.AfterQuery(bc.ctx, e)
			}
		})
	}
}
