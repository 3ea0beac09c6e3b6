package limit

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/slotsql"
)

// Held is a slot that a transaction locks, or that a lease-mode batch
// leased with its jobs.
type Held struct {
	Limit slotsql.Limit
	Slot  int
}

// Lease marks the slots of held, which tx locks, as leased by token for
// lease from now, by the database clock.
func Lease(ctx context.Context, sql slotsql.SQL, tx bun.IDB, held []Held, token string, lease time.Duration) error {
	for _, h := range held {
		if err := sql.Hold(ctx, tx, h.Limit, []int{h.Slot}, token, lease); err != nil {
			return err
		}
	}
	return nil
}

// Extend pushes the end of the leases of held to lease from now, and
// reports whether token still held every one.
func Extend(ctx context.Context, sql slotsql.SQL, db bun.IDB, held []Held, token string, lease time.Duration) (bool, error) {
	for _, h := range held {
		n, err := sql.Extend(ctx, db, h.Limit, []int{h.Slot}, token, lease)
		if err != nil || n == 0 {
			return false, err
		}
	}
	return true, nil
}

// Free gives h back, if token still holds it.
func Free(ctx context.Context, sql slotsql.SQL, db bun.IDB, h Held, token string) error {
	return sql.Free(ctx, db, h.Limit, []int{h.Slot}, token)
}
