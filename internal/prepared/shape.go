package prepared

import (
	"database/sql/driver"
	"reflect"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// Preparable reports whether the claims of one row of the model typ,
// whose table is table, may be prepared: it has no hooks that bun would
// run around a SELECT and no relations (a prepared claim is scanned by
// bun.DB.ScanRows, which knows neither), and its key values pass through
// database/sql as they are.
func Preparable(typ reflect.Type, table *schema.Table) bool {
	ptr := reflect.PointerTo(typ)
	for _, hook := range []reflect.Type{
		reflect.TypeFor[bun.BeforeSelectHook](),
		reflect.TypeFor[bun.AfterSelectHook](),
		reflect.TypeFor[schema.BeforeAppendModelHook](),
	} {
		if typ.Implements(hook) || ptr.Implements(hook) {
			return false
		}
	}
	if len(table.Relations) > 0 {
		return false
	}
	valuer := reflect.TypeFor[driver.Valuer]()
	for _, f := range table.PKs {
		t := f.StructField.Type
		if t.Implements(valuer) {
			continue
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.String:
		default:
			return false // uint64 (database/sql refuses the high bit), time, bytes, structs
		}
	}
	return true
}

// MaxKeys is the most keys a prepared claim or re-check is written for;
// more run in text.
const MaxKeys = 64

// KeyShape is the number of keys that the prepared statement of a claim
// or re-check of n keys is written for: n rounded up to a power of two,
// so that a queue takes a handful of texts, each prepared once per
// connection. The places past n repeat the last key, which IN ignores.
func KeyShape(n int) int {
	shape := 1
	for shape < n {
		shape *= 2
	}
	return shape
}
