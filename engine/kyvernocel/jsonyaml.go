package kyvernocel

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"
)

// json library (sdk extensions/cel/libs/json): member functions of the
// "json" constant.
//
//	json.unmarshal(dyn string) → dyn   (numbers are doubles, as encoding/json decodes them)
//	json.marshal(dyn)          → string
//
// yaml library (sdk extensions/cel/libs/yaml):
//
//	yaml.parse(string) → dyn           (sigs.k8s.io/yaml: YAML → JSON → encoding/json)

func jsonFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("unmarshal",
			cel.MemberOverload("unmarshal_string_dyn", []*cel.Type{JSONType, types.DynType}, types.DynType,
				cel.BinaryBinding(jsonUnmarshal))),
		cel.Function("marshal",
			cel.MemberOverload("marshal_dyn_string", []*cel.Type{JSONType, types.DynType}, types.StringType,
				cel.BinaryBinding(jsonMarshal))),
	}
}

func yamlFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("parse",
			cel.MemberOverload("parse_string_dyn", []*cel.Type{YAMLType, types.StringType}, types.DynType,
				cel.BinaryBinding(yamlParse))),
	}
}

func jsonUnmarshal(_, value ref.Val) ref.Val {
	s, errVal := toString(value)
	if errVal != nil {
		return errVal
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

func jsonMarshal(_, value ref.Val) ref.Val {
	native, err := toJSONNative(value)
	if err != nil {
		return types.WrapErr(err)
	}
	data, err := json.Marshal(native)
	if err != nil {
		return types.WrapErr(err)
	}
	return types.String(data)
}

func yamlParse(_, value ref.Val) ref.Val {
	s, errVal := toString(value)
	if errVal != nil {
		return errVal
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// toJSONNative converts a CEL value to Go values for encoding/json, as
// Kyverno's json library does (including its error texts).
func toJSONNative(value any) (any, error) {
	if v, ok := value.(ref.Val); ok {
		switch v.Type() {
		case types.NullType:
			return nil, nil
		case types.MapType:
			native, err := v.ConvertToNative(anyMapType)
			if err != nil {
				return nil, fmt.Errorf("json: failed to convert CEL map to native map: %w", err)
			}
			return toJSONNative(native)
		case types.ListType:
			native, err := v.ConvertToNative(anySliceType)
			if err != nil {
				return nil, fmt.Errorf("json: failed to convert CEL list to native slice: %w", err)
			}
			return toJSONNative(native)
		}
		return toJSONNative(v.Value())
	}
	switch v := value.(type) {
	case nil:
		return nil, nil
	case structpb.NullValue:
		return nil, nil
	case bool, string,
		int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64, uintptr,
		float32, float64,
		[]bool, []string,
		[]int, []int8, []int16, []int32, []int64,
		[]uint, []byte, []uint16, []uint32, []uint64, []uintptr,
		[]float32, []float64:
		return v, nil
	case map[string]any:
		ret := make(map[string]any, len(v))
		for k, val := range v {
			converted, err := toJSONNative(val)
			if err != nil {
				return nil, err
			}
			ret[k] = converted
		}
		return ret, nil
	case []any:
		ret := make([]any, len(v))
		for i, val := range v {
			converted, err := toJSONNative(val)
			if err != nil {
				return nil, err
			}
			ret[i] = converted
		}
		return ret, nil
	}
	rv := reflect.ValueOf(value)
	switch rv.Kind() {
	case reflect.Invalid:
		return nil, nil
	case reflect.Map:
		ret := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			key, err := toJSONNative(iter.Key().Interface())
			if err != nil {
				return nil, err
			}
			strKey, ok := key.(string)
			if !ok {
				return nil, fmt.Errorf("json: unsupported map key type %T (original key type: %T)", key, iter.Key().Interface())
			}
			val, err := toJSONNative(iter.Value().Interface())
			if err != nil {
				return nil, err
			}
			ret[strKey] = val
		}
		return ret, nil
	case reflect.Slice, reflect.Array:
		ret := make([]any, rv.Len())
		for i := 0; i < rv.Len(); i++ {
			val, err := toJSONNative(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			ret[i] = val
		}
		return ret, nil
	default:
		return value, nil
	}
}

// ---- the json and yaml objects ----

type jsonObject struct{}

func (jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return nil, errors.New("type conversion error from 'json.Json' to '" + t.String() + "'")
}
func (o jsonObject) ConvertToType(t ref.Type) ref.Val { return convertOpaque(o, JSONType, t) }
func (o jsonObject) Equal(other ref.Val) ref.Val {
	if _, ok := other.(jsonObject); ok {
		return types.True
	}
	return types.MaybeNoSuchOverloadErr(other)
}
func (jsonObject) Type() ref.Type { return JSONType }
func (jsonObject) Value() any     { return struct{ JsonIface struct{} }{} }

type yamlObject struct{}

func (yamlObject) ConvertToNative(t reflect.Type) (any, error) {
	return nil, errors.New("type conversion error from 'yaml.Yaml' to '" + t.String() + "'")
}
func (o yamlObject) ConvertToType(t ref.Type) ref.Val { return convertOpaque(o, YAMLType, t) }
func (o yamlObject) Equal(other ref.Val) ref.Val {
	if _, ok := other.(yamlObject); ok {
		return types.True
	}
	return types.MaybeNoSuchOverloadErr(other)
}
func (yamlObject) Type() ref.Type { return YAMLType }
func (yamlObject) Value() any     { return struct{ YamlIface struct{} }{} }
