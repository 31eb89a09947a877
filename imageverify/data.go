package imageverify

import (
	"reflect"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var (
	timeType   = reflect.TypeFor[time.Time]()
	v1TimeType = reflect.TypeFor[v1.Time]()
)

// goValue renders a Go value as JSON-like values keyed by the Go field
// names (getImageData returns Kyverno's ImageData as a native Go object:
// .Manifest.SchemaVersion, .ConfigData.Architecture). Times are RFC 3339
// strings; integers int64.
func goValue(x any) any { return goReflect(reflect.ValueOf(x)) }

func goReflect(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Invalid:
		return nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return goReflect(v.Elem())
	case reflect.Struct:
		switch v.Type() {
		case timeType:
			return v.Interface().(time.Time).Format(time.RFC3339)
		case v1TimeType:
			return v.Interface().(v1.Time).Format(time.RFC3339)
		}
		out := make(map[string]any, v.NumField())
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			out[f.Name] = goReflect(v.Field(i))
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = goReflect(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := make(map[string]any, v.Len())
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			if k.Kind() != reflect.String {
				continue
			}
			out[k.String()] = goReflect(iter.Value())
		}
		return out
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(v.Uint())
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	return nil
}
