package celeval

import (
	"fmt"
	"math"
	"reflect"

	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"
)

// ToJSON converts a CEL value to JSON-shaped data (map[string]any, []any,
// string, bool, int64, float64, nil) as kube-apiserver's mutating policy
// patchers see it: converted to a protobuf Value, written as JSON and read
// back into an unstructured object — so every number is a float64 first,
// and a number JSON writes without a fraction or exponent reads back as an
// int64.
func ToJSON(v ref.Val) (any, error) {
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

func fromStructpb(v *structpb.Value) (any, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue, nil:
		return nil, nil
	case *structpb.Value_BoolValue:
		return k.BoolValue, nil
	case *structpb.Value_StringValue:
		return k.StringValue, nil
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("json: unsupported value: %v", f)
		}
		// encoding/json writes integral values below 1e21 without a
		// fraction or exponent; those in int64's range read back as int64.
		if f == math.Trunc(f) && math.Abs(f) < 1e21 && f >= math.MinInt64 && f < math.MaxInt64 {
			return int64(f), nil
		}
		return f, nil
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
