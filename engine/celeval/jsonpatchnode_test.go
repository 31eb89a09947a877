package celeval

import (
	"reflect"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apiserver/pkg/cel/mutation"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/jsonval"
)

// TestJSONPatchNodeAsCELGo checks that JSONPatch literals planned as
// jsonPatchNode give what cel-go's own object construction gives
// (mutation.JSONPatchType.Val of the fields): the same patches, the same
// errors.
func TestJSONPatchNodeAsCELGo(t *testing.T) {
	e, err := celenv.New()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := e.Mutating(false)
	if err != nil {
		t.Fatal(err)
	}
	obj := jsonval.NewMap(jsonObject())
	for _, expr := range []string{
		`[JSONPatch{op: "add", path: "/metadata/labels/a", value: "b"}]`,
		`[JSONPatch{path: "/metadata/labels/a", op: "replace", value: object.metadata.labels}]`,
		`[JSONPatch{op: "move", from: "/a", path: "/b"}, JSONPatch{op: "remove", path: "/c"}]`,
		`[JSONPatch{op: "test", path: "/x", value: null}]`,
		`[JSONPatch{op: "add", path: "/x", value: [dyn(1), dyn(2.5), dyn("s"), dyn({"k": [true]})]}]`,
		`[JSONPatch{}]`,
		`[JSONPatch{op: dyn("add"), path: dyn(1), value: 1}]`,
		`[JSONPatch{op: dyn(true), path: "/x"}]`,
		`[JSONPatch{op: "add", from: dyn(object.spec.replicas), path: "/x"}]`,
		`[JSONPatch{op: "add", path: "/x", value: object.nope}]`,
		`[JSONPatch{op: "add", path: "/spec/containers/" + string(object.spec.replicas), value: 1}]`,
		`object.metadata.labels.transformList(k, v, JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey(k), value: v})`,
		`[JSONPatch{op: "add", path: "/x", ?value: optional.of(1)}]`,
		`[JSONPatch{op: "add", path: "/x", ?value: optional.none()}]`,
		`JSONPatch{op: "add", path: "/x", value: 1}.op`,
		`has(JSONPatch{op: "add", path: "/x"}.value)`,
	} {
		ast, iss := pair.Tracked.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		opts := jsonPatchConstructors(ast)
		plain, err := pair.Fast.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			t.Fatal(err)
		}
		node, err := pair.Fast.Program(ast, append(opts, cel.EvalOptions(cel.OptOptimize))...)
		if err != nil {
			t.Fatal(err)
		}
		act := map[string]any{"object": obj}
		want, _, wantErr := plain.Eval(act)
		got, _, gotErr := node.Eval(act)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Errorf("%s: error %v, cel-go's %v", expr, gotErr, wantErr)
			continue
		}
		if wantErr == nil && !samePatchValue(got, want) {
			t.Errorf("%s: %#v, cel-go's %#v", expr, got.Value(), want.Value())
		}
	}
}

// samePatchValue compares values that may be, or hold, JSONPatch values.
func samePatchValue(a, b ref.Val) bool {
	if pa, ok := a.(*mutation.JSONPatchVal); ok {
		pb, ok := b.(*mutation.JSONPatchVal)
		return ok && pa.Op == pb.Op && pa.Path == pb.Path && pa.From == pb.From &&
			((pa.Val == nil) == (pb.Val == nil)) && (pa.Val == nil || pa.Val.Equal(pb.Val) == types.True)
	}
	la, okA := a.(interface{ Size() ref.Val })
	lb, okB := b.(interface{ Size() ref.Val })
	if okA && okB && reflect.TypeOf(a) == reflect.TypeOf(b) {
		if la.Size().Equal(lb.Size()) != types.True {
			return false
		}
		if ga, ok := a.(interface{ Get(ref.Val) ref.Val }); ok {
			gb := b.(interface{ Get(ref.Val) ref.Val })
			n := la.Size().(types.Int)
			for i := types.Int(0); i < n; i++ {
				if !samePatchValue(ga.Get(i), gb.Get(i)) {
					return false
				}
			}
			return true
		}
	}
	return a.Equal(b) == types.True
}
