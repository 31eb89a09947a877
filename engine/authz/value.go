package authz

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// value is a CEL value of one of the opaque types of the authorization
// libraries (kyverno-authz's type names): responses, headers, query
// parameters. Its Go value is never modified: builders copy.
type value struct {
	t *types.Type
	v any
}

func (a value) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from %s to %v", a.t.TypeName(), t)
}

func (a value) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return a.t
	}
	if t.TypeName() == a.t.TypeName() {
		return a
	}
	return types.NewErr("type conversion error from %s to %s", a.t.TypeName(), t.TypeName())
}

func (a value) Equal(o ref.Val) ref.Val {
	b, ok := o.(value)
	return types.Bool(ok && a.t == b.t && reflect.DeepEqual(a.v, b.v))
}

func (a value) Type() ref.Type { return a.t }
func (a value) Value() any     { return a.v }

// valueOf returns the Go value of v when it is a value of type t.
func valueOf[T any](v ref.Val, t *types.Type) (T, bool) {
	var zero T
	a, ok := v.(value)
	if !ok || a.t != t {
		return zero, false
	}
	out, ok := a.v.(T)
	return out, ok
}

func str(v ref.Val) (string, error) {
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("expected a string, got %s", v.Type().TypeName())
	}
	return string(s), nil
}

func noOverload() ref.Val { return types.NewErr("no such overload") }

// jsonOf converts a CEL value to JSON-shaped Go data (maps, lists,
// strings, numbers, bools, nil): what WithMetadata records.
func jsonOf(v ref.Val) (any, error) {
	switch t := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(t), nil
	case types.Int:
		return int64(t), nil
	case types.Uint:
		return uint64(t), nil
	case types.Double:
		return float64(t), nil
	case types.String:
		return string(t), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(t), nil
	case types.Timestamp:
		return t.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return t.String(), nil
	case *types.Err:
		return nil, t
	case traits.Mapper:
		out := map[string]any{}
		for it := t.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("metadata keys must be strings, got %s", k.Type().TypeName())
			}
			e, err := jsonOf(t.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		var out []any
		for it := t.Iterator(); it.HasNext() == types.True; {
			e, err := jsonOf(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return nil, errors.New("cannot convert " + v.Type().TypeName() + " to JSON")
}
