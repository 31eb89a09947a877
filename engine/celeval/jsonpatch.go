package celeval

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apiserver/pkg/cel/mutation"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"

	"github.com/arbiter-pdp/arbiter/engine/patch"
)

// JSONPatchOps converts the value of a JSONPatch expression (a list of
// JSONPatch) into patch operations, with values as JSON-shaped data, as
// kube-apiserver's JSON patcher (and Kyverno's copy of it) builds its
// patch (k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch
// json_patch.go), with its error texts: an operation without a value has
// patch.NoValue. Kyverno's MutatingPolicy and Kubernetes'
// MutatingAdmissionPolicy share it.
func JSONPatchOps(val ref.Val) ([]patch.Op, error) {
	iter, ok := val.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array")
	}
	var ops []patch.Op
	n, sized := iter.Size().(types.Int)
	if sized {
		if n == 0 {
			return nil, nil
		}
		ops = make([]patch.Op, 0, n)
	}
	// By index when the list is sized (no iterator to allocate).
	var it traits.Iterator
	if !sized {
		it = iter.Iterator()
	}
	for i := types.Int(0); ; i++ {
		var v ref.Val
		if sized {
			if i >= n {
				break
			}
			v = iter.Get(i)
		} else {
			if it.HasNext() != types.True {
				break
			}
			v = it.Next()
		}
		jp, ok := v.(*mutation.JSONPatchVal)
		if !ok {
			native, err := v.ConvertToNative(reflect.TypeFor[*mutation.JSONPatchVal]())
			if err != nil {
				return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch: %w", err)
			}
			if jp, ok = native.(*mutation.JSONPatchVal); !ok {
				return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of %T", native)
			}
		}
		op := patch.Op{Op: jp.Op, Path: jp.Path, From: jp.From, Value: patch.NoValue{}}
		if jp.Val != nil {
			if ov, ok := jp.Val.(*dynamic.ObjectVal); ok {
				if err := ov.CheckTypeNamesMatchFieldPathNames(); err != nil {
					return nil, fmt.Errorf("type mismatch: %w", err)
				}
			}
			var err error
			if op.Value, err = ToJSON(jp.Val); err != nil {
				return nil, fmt.Errorf("JSONPath valueExpression evaluated to a type that could not marshal to JSON: %w", err)
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}
