package kyvernocel

import (
	"reflect"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
)

type testException struct {
	AllowedImages []string `cel:"allowedImages"`
	AllowedValues []string `cel:"allowedValues"`
}

// newTestEnv builds an environment like the lead's: the Kubernetes base
// environment for stored expressions, the cel-go extensions Kyverno adds, the
// object variables and the libraries.
func newTestEnv(t testing.TB, o Options) *cel.Env {
	t.Helper()
	base := environment.MustBaseEnvSet(version.MajorMinor(1, 0))
	opts := []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Bindings(),
		ext.Encoders(),
		ext.Math(),
		ext.Protos(),
		ext.Regex(ext.RegexVersion(1)),
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.DynType),
		// as the engine registers the exceptions type before the libraries
		ext.NativeTypes(reflect.TypeFor[testException](), ext.ParseStructTags(true)),
		cel.Variable("exceptions", types.NewObjectType("kyvernocel.testException")),
	}
	opts = append(opts, Libraries(o)...)
	set, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        opts,
	})
	if err != nil {
		t.Fatalf("extending base env: %v", err)
	}
	env, err := set.Env(environment.StoredExpressions)
	if err != nil {
		t.Fatalf("stored env: %v", err)
	}
	return env
}

func TestEnvBuilds(t *testing.T) {
	for _, ns := range []bool{false, true} {
		env := newTestEnv(t, Options{Namespaced: ns})
		for _, expr := range []string{
			`parseImageReference("nginx").registry()`,
			`sha256("x") == hash.sha256("x")`,
			`json.marshal({"a": 1})`,
			`math.round(1.234, 2) == 1.23 && math.greatest(1, 2) == 2`,
			`exceptions.allowedImages.size() == 0 && parseServiceAccount("a").Name == ""`,
		} {
			if _, iss := env.Compile(expr); iss.Err() != nil {
				t.Errorf("namespaced=%v %s: %v", ns, expr, iss.Err())
			}
		}
	}
}

var (
	testEnvsMu sync.Mutex
	testEnvs   = map[bool]*cel.Env{}
)

// cachedEnv returns a shared test environment (building one takes ~100ms).
func cachedEnv(t testing.TB, namespaced bool) *cel.Env {
	t.Helper()
	testEnvsMu.Lock()
	defer testEnvsMu.Unlock()
	if env, ok := testEnvs[namespaced]; ok {
		return env
	}
	env := newTestEnv(t, Options{Namespaced: namespaced})
	testEnvs[namespaced] = env
	return env
}

// evalExpr compiles and evaluates expr; a compile error is returned as error,
// an evaluation error as a *types.Err value.
func evalExpr(t testing.TB, namespaced bool, expr string, act map[string]any) (ref.Val, error) {
	t.Helper()
	env := cachedEnv(t, namespaced)
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := env.Program(ast)
	if err != nil {
		return nil, err
	}
	if _, ok := act["object"]; !ok {
		act["object"] = map[string]any{}
	}
	out, _, err := prg.Eval(act)
	if err != nil {
		return types.WrapErr(err), nil
	}
	return out, nil
}
