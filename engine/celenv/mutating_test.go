package celenv_test

import (
	"testing"

	"github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

func TestMutatingEnv(t *testing.T) {
	env, err := celenv.Default()
	if err != nil {
		t.Fatal(err)
	}
	pe, err := env.ForMutatingPolicy(false)
	if err != nil {
		t.Fatal(err)
	}
	pe.DeclareVariable("labels", celtypes.NewMapType(celtypes.StringType, celtypes.StringType))
	for _, c := range []struct{ expr, want string }{
		{`Object{metadata: Object.metadata{labels: {"a": "b"}}}`, "Object"},
		{`Object{metadata: Object.metadata{labels: variables.labels}}`, "Object"},
		{`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x"), value: "y"}]`, "list(JSONPatch)"},
		{`object.spec.containers.map(c, Object.spec.containers{name: c.name, image: "x"})`, "list(Object.spec.containers)"},
	} {
		for name, env := range map[string]*cel.Env{"tracked": pe.Tracked, "fast": pe.Fast} {
			ast, iss := env.Compile(c.expr)
			if iss.Err() != nil {
				t.Fatalf("%s %s: %v", name, c.expr, iss.Err())
			}
			if got := ast.OutputType().String(); got != c.want {
				t.Errorf("%s %s: output type %s, want %s", name, c.expr, got, c.want)
			}
		}
	}
	// The validating policy environment has no mutation types.
	ve, err := env.ForPolicy(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, iss := ve.Tracked.Compile(`Object{}`); iss.Err() == nil {
		t.Fatal("Object{} compiles in the validating policy environment")
	}
}
