package kyvernocel

import (
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Argument conversion, with the two error styles of Kyverno's libraries:
// getArg* wraps a conversion error as "invalid arg <i>: <err>" (sdk
// utils.GetArg), to* returns it as is (utils.ConvertToNative + types.WrapErr).
// Both take a fast path for the types the checker already guarantees.

var (
	stringType         = reflect.TypeFor[string]()
	stringMapType      = reflect.TypeFor[map[string]string]()
	anyMapType         = reflect.TypeFor[map[string]any]()
	anySliceType       = reflect.TypeFor[[]any]()
	bytesType          = reflect.TypeFor[[]byte]()
	float64Type        = reflect.TypeFor[float64]()
	int64Type          = reflect.TypeFor[int64]()
	emptyStringMapCEL  = types.NewStringStringMap(types.DefaultTypeAdapter, map[string]string{})
	emptyStringMapArgs = map[string]string{}
)

func getArgString(args []ref.Val, i int) (string, ref.Val) {
	if s, ok := args[i].(types.String); ok {
		return string(s), nil
	}
	v, err := args[i].ConvertToNative(stringType)
	if err != nil {
		return "", types.NewErr("invalid arg %d: %v", i, err)
	}
	return v.(string), nil
}

func getArgStringMap(args []ref.Val, i int) (map[string]string, ref.Val) {
	if args[i] == emptyStringMapCEL {
		return emptyStringMapArgs, nil
	}
	v, err := args[i].ConvertToNative(stringMapType)
	if err != nil {
		return nil, types.NewErr("invalid arg %d: %v", i, err)
	}
	return v.(map[string]string), nil
}

func toString(v ref.Val) (string, ref.Val) {
	if s, ok := v.(types.String); ok {
		return string(s), nil
	}
	n, err := v.ConvertToNative(stringType)
	if err != nil {
		return "", types.WrapErr(err)
	}
	return n.(string), nil
}

func argCountErr(want, got int) ref.Val {
	return types.NewErr("expected %d arguments, got %d", want, got)
}
