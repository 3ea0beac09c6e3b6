package bunqueuetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// argsDiffs says how got, a job's args, differs from want: each exported
// field of want (or want itself, if it is not a struct) that is not its
// zero value must have the same JSON as got's, as the job was stored.
// Fields that JSON leaves out (`json:"-"`) are not compared.
func argsDiffs(want, got any) []string {
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	for w.Kind() == reflect.Pointer {
		if w.IsNil() {
			return nil
		}
		if g.IsNil() {
			return []string{fmt.Sprintf("Args is null, want %s", jsonOf(w.Interface()))}
		}
		w, g = w.Elem(), g.Elem()
	}
	if w.Kind() != reflect.Struct {
		return valueDiff("Args", w, g)
	}
	var d []string
	for i := range w.NumField() {
		f := w.Type().Field(i)
		if !f.IsExported() || strings.Split(f.Tag.Get("json"), ",")[0] == "-" {
			continue
		}
		d = append(d, valueDiff("Args."+f.Name, w.Field(i), g.Field(i))...)
	}
	return d
}

// valueDiff says how got differs from want, named name, unless want is
// its zero value.
func valueDiff(name string, want, got reflect.Value) []string {
	if want.IsZero() {
		return nil
	}
	wj, gj := jsonOf(want.Interface()), jsonOf(got.Interface())
	if bytes.Equal(wj, gj) {
		return nil
	}
	return []string{fmt.Sprintf("%s is %s, want %s", name, gj, wj)}
}

// jsonOf is v's JSON, or the error that kept it from encoding.
func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprintf("<%v>", err))
	}
	return b
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
