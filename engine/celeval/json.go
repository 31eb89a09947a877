package celeval

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
)

// ToJSON converts a CEL value to JSON-shaped data (map[string]any, []any,
// string, bool, int64, float64, nil) as kube-apiserver's mutating policy
// patchers see it: converted to a protobuf Value, written as JSON and read
// back into an unstructured object — so every number is a float64 first,
// and a number JSON writes without a fraction or exponent reads back as an
// int64.
func ToJSON(v ref.Val) (any, error) {
	if out, ok := toJSONDirect(v); ok {
		return out, nil
	}
	return toJSONProto(v)
}

// toJSONProto is ToJSON through the protobuf Value.
func toJSONProto(v ref.Val) (any, error) {
	native, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, err
	}
	pv, ok := native.(*structpb.Value)
	if !ok {
		return nil, fmt.Errorf("unexpected conversion of %s to %T", v.Type().TypeName(), native)
	}
	return fromStructpb(pv)
}

// jsonNumber is the JSON-shaped value of a protobuf number value (see
// fromStructpb); ok is false for NaN and the infinities, which JSON cannot
// write.
func jsonNumber(f float64) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, false
	}
	// encoding/json writes integral values below 1e21 without a
	// fraction or exponent; those in int64's range read back as int64.
	if f == math.Trunc(f) && math.Abs(f) < 1e21 && f >= math.MinInt64 && f < math.MaxInt64 {
		return int64(f), true
	}
	return f, true
}

// maxIntJSON bounds the integers CEL converts to protobuf numbers (larger
// ones become decimal strings): Number.MAX_SAFE_INTEGER.
const maxIntJSON = 1<<53 - 1

// The concrete types of the CEL lists and maps toJSONDirect converts
// element by element as their ConvertToNative does (a concatenation, which
// converts its elements through their Go values, and the other kinds are
// left to the protobuf conversion).
var (
	baseListType = reflect.TypeOf(types.NewRefValList(types.DefaultTypeAdapter, nil))
	baseMapType  = reflect.TypeOf(types.NewRefValMap(types.DefaultTypeAdapter, nil))
)

// toJSONDirect is ToJSON without the protobuf Value, for the values CEL
// expressions build and read from objects: scalars, CEL lists and maps with
// string keys, and jsonval's objects. ok is false for any other value (or
// one that fails to convert): toJSONProto converts it, with its errors.
func toJSONDirect(v ref.Val) (any, bool) {
	switch t := v.(type) {
	case types.String:
		return string(t), true
	case types.Bool:
		return bool(t), true
	case types.Null:
		return nil, true
	case types.Int:
		if t >= -maxIntJSON && t <= maxIntJSON {
			return int64(t), true
		}
		return strconv.FormatInt(int64(t), 10), true
	case types.Uint:
		if t <= maxIntJSON {
			return int64(t), true
		}
		return strconv.FormatUint(uint64(t), 10), true
	case types.Double:
		return jsonNumber(float64(t))
	case *jsonval.Map:
		return rawToJSON(t.Value())
	case *jsonval.List:
		return rawToJSON(t.Value())
	}
	switch reflect.TypeOf(v) {
	case baseListType:
		l := v.(traits.Lister)
		n, ok := l.Size().(types.Int)
		if !ok {
			return nil, false
		}
		out := make([]any, n)
		for i := range out {
			e, ok := toJSONDirect(l.Get(types.Int(i)))
			if !ok {
				return nil, false
			}
			out[i] = e
		}
		return out, true
	case baseMapType:
		m := v.(traits.Mapper)
		n, ok := m.Size().(types.Int)
		if !ok {
			return nil, false
		}
		out := make(map[string]any, n)
		for it := m.Iterator(); it.HasNext() == types.True; {
			k, ok := it.Next().(types.String)
			if !ok {
				return nil, false
			}
			e, ok := toJSONDirect(m.Get(k))
			if !ok {
				return nil, false
			}
			out[string(k)] = e
		}
		return out, true
	}
	return nil, false
}

// rawToJSON is toJSONDirect for JSON-shaped data (that of a jsonval
// object), which CEL converts as the values it adapts it to: an int64 as
// types.Int, and so on.
func rawToJSON(v any) (any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, true
	case string:
		return t, true
	case bool:
		return t, true
	case int64:
		return toJSONDirect(types.Int(t))
	case float64:
		return jsonNumber(t)
	case map[string]any:
		if t == nil {
			return map[string]any{}, true
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			x, ok := rawToJSON(e)
			if !ok {
				return nil, false
			}
			out[k] = x
		}
		return out, true
	case []any:
		if t == nil {
			return []any{}, true
		}
		out := make([]any, len(t))
		for i, e := range t {
			x, ok := rawToJSON(e)
			if !ok {
				return nil, false
			}
			out[i] = x
		}
		return out, true
	}
	return nil, false
}

func fromStructpb(v *structpb.Value) (any, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue, nil:
		return nil, nil
	case *structpb.Value_BoolValue:
		return k.BoolValue, nil
	case *structpb.Value_StringValue:
		return k.StringValue, nil
	case *structpb.Value_NumberValue:
		x, ok := jsonNumber(k.NumberValue)
		if !ok {
			return nil, fmt.Errorf("json: unsupported value: %v", k.NumberValue)
		}
		return x, nil
	case *structpb.Value_ListValue:
		out := make([]any, len(k.ListValue.GetValues()))
		for i, e := range k.ListValue.GetValues() {
			x, err := fromStructpb(e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case *structpb.Value_StructValue:
		out := make(map[string]any, len(k.StructValue.GetFields()))
		for key, e := range k.StructValue.GetFields() {
			x, err := fromStructpb(e)
			if err != nil {
				return nil, err
			}
			out[key] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported protobuf value %T", v.GetKind())
}
