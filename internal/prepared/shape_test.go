package prepared

import (
	"context"
	"database/sql/driver"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
)

type prepInt struct {
	ID     int64 `bun:",pk"`
	Status string
}

type prepNamed struct {
	ID     prepID `bun:",pk"`
	Status string
}

type prepID int32

type prepPair struct {
	A      int    `bun:",pk"`
	B      string `bun:",pk"`
	Status string
}

// prepKey is a key type of the app's own that is a driver.Valuer, as
// uuid.UUID is.
type prepKey [2]uint64

func (k prepKey) Value() (driver.Value, error) { return int64(k[0]), nil }

type prepValuer struct {
	ID     prepKey `bun:",pk"`
	Status string
}

type prepUint64 struct {
	ID     uint64 `bun:",pk"`
	Status string
}

type prepTime struct {
	At     time.Time `bun:",pk"`
	Status string
}

type prepBytes struct {
	ID     []byte `bun:",pk"`
	Status string
}

type prepHooked struct {
	ID     int64 `bun:",pk"`
	Status string
}

func (*prepHooked) BeforeSelect(context.Context, *bun.SelectQuery) error { return nil }

type prepAfter struct {
	ID     int64 `bun:",pk"`
	Status string
}

func (*prepAfter) AfterSelect(context.Context, *bun.SelectQuery) error { return nil }

type prepOwner struct {
	ID int64 `bun:",pk"`
}

type prepRelated struct {
	ID      int64 `bun:",pk"`
	OwnerID int64
	Owner   *prepOwner `bun:"rel:belongs-to,join:owner_id=id"`
}

// Preparable says which models' one-row claims may run prepared: keys that
// pass through database/sql as they are, and no select hooks or
// relations, which bun.DB.ScanRows would not honour.
func TestPreparable(t *testing.T) {
	tables := mysqldialect.New().Tables()
	for _, tc := range []struct {
		model any
		want  bool
	}{
		{prepInt{}, true},
		{prepNamed{}, true},
		{prepPair{}, true},
		{prepValuer{}, true},
		{prepUint64{}, false},
		{prepTime{}, false},
		{prepBytes{}, false},
		{prepHooked{}, false},
		{prepAfter{}, false},
		{prepRelated{}, false},
	} {
		typ := reflect.TypeOf(tc.model)
		require.Equal(t, tc.want, Preparable(typ, tables.Get(typ)), "%s", typ)
	}
}
