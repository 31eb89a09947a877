package gpol

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

// The generator library (sdk extensions/cel/libs/generator): the
// `generator` variable and its member function
//
//	generator.Apply(namespace string, objects list(map(string, dyn))) → bool   (GeneratingPolicy)
//	generator.Apply(objects list(map(string, dyn))) → bool                     (NamespacedGeneratingPolicy: its own namespace)
//
// with the camelCase spelling apply. Each object is generated in the
// namespace (set as its metadata.namespace, removed when ""); an object
// with an `items` list (a resource.List result) generates its items. The
// overload ids and error texts are Kyverno's. Where Kyverno binds the
// variable to the engine's context with cel.Globals, Arbiter gives each
// evaluation its own collector (the activation resolves `generator`).

// GeneratorVar is the name of the variable.
const GeneratorVar = "generator"

// GeneratorType is the type of the `generator` variable.
var GeneratorType = types.NewOpaqueType("generator.Context")

var structType = reflect.TypeFor[*structpb.Struct]()

// collector gathers what one evaluation generates.
type collector struct {
	// ns is the namespace of a namespaced policy ("" otherwise).
	ns        string
	generated []map[string]any
}

func (c *collector) namespace() string { return c.ns }

// generate records objects generated in namespace, as Kyverno's CLI
// context (FakeContextProvider.GenerateResources) does.
func (c *collector) generate(namespace string, objects []map[string]any) error {
	for _, obj := range objects {
		setNamespace(obj, namespace)
		items, isList := obj["items"].([]any)
		if !isList {
			c.generated = append(c.generated, obj)
			continue
		}
		for _, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("items member is not an object")
			}
			setNamespace(m, namespace)
			c.generated = append(c.generated, m)
		}
	}
	return nil
}

// setNamespace sets metadata.namespace, or removes it when ns is "" (as
// unstructured.SetNamespace).
func setNamespace(obj map[string]any, ns string) {
	md, ok := obj["metadata"].(map[string]any)
	if ns == "" {
		if ok {
			delete(md, "namespace")
		}
		return
	}
	if !ok {
		md = map[string]any{}
		obj["metadata"] = md
	}
	md["namespace"] = ns
}

// generatorValue is the value of `generator` in one evaluation.
type generatorValue struct{ c *collector }

func (v generatorValue) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("unsupported native conversion from generator.Context to '%v'", t)
}

func (v generatorValue) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return GeneratorType
	}
	return types.NewErr("type conversion error from 'generator.Context' to '%s'", t.TypeName())
}

func (v generatorValue) Equal(o ref.Val) ref.Val {
	w, ok := o.(generatorValue)
	return types.Bool(ok && w.c == v.c)
}

func (v generatorValue) Type() ref.Type { return GeneratorType }
func (v generatorValue) Value() any     { return v.c }

// apply implements both overloads: args are the receiver, the namespace
// (cluster policies only) and the objects; ns is the policy's namespace
// for a namespaced policy.
func apply(args []ref.Val, namespaced bool, ns string) ref.Val {
	want := 3
	if namespaced {
		want = 2
	}
	if len(args) != want {
		return types.NewErr("expected %d arguments, got %d", want, len(args))
	}
	g, ok := args[0].(generatorValue)
	if !ok || g.c == nil {
		return types.NewErr("invalid arg 0: unsupported native conversion from %s to 'generator.Context'", args[0].Type().TypeName())
	}
	next := 1
	if !namespaced {
		s, ok := args[1].(types.String)
		if !ok {
			return types.NewErr("invalid arg 1: type conversion error from %s to 'string'", args[1].Type().TypeName())
		}
		ns, next = string(s), 2
	}
	list, ok := args[next].(traits.Lister)
	if !ok {
		return types.NewErr("invalid arg %d: type conversion error from %s to '[]*structpb.Struct'", next, args[next].Type().TypeName())
	}
	var objects []map[string]any
	for it := list.Iterator(); it.HasNext() == types.True; {
		e := it.Next()
		s, err := e.ConvertToNative(structType)
		if err != nil {
			return types.NewErr("invalid arg %d: %v", next, err)
		}
		objects = append(objects, s.(*structpb.Struct).AsMap())
	}
	if err := g.c.generate(ns, objects); err != nil {
		return types.NewErr("failed to generate resources: %v", err)
	}
	return types.True
}

// generatorOptions declare the library for a cluster (ns "") or namespaced
// policy. The namespaced overloads read the policy's namespace from the
// activation's generator value, so the declarations are the same for
// every namespaced policy.
func generatorOptions(namespaced bool) []cel.EnvOption {
	objects := types.NewListType(types.NewMapType(types.StringType, types.AnyType))
	overloads := func(suffix string) cel.FunctionOpt {
		if namespaced {
			return cel.MemberOverload("generator_apply_list_"+suffix,
				[]*cel.Type{GeneratorType, objects}, types.BoolType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					g, _ := args[0].(generatorValue)
					ns := ""
					if g.c != nil {
						ns = g.c.namespace()
					}
					return apply(args, true, ns)
				}))
		}
		return cel.MemberOverload("generator_apply_string_list_"+suffix,
			[]*cel.Type{GeneratorType, types.StringType, objects}, types.BoolType,
			cel.FunctionBinding(func(args ...ref.Val) ref.Val { return apply(args, false, "") }))
	}
	return []cel.EnvOption{
		cel.Variable(GeneratorVar, GeneratorType),
		cel.Function("Apply", overloads("pascal")),
		cel.Function("apply", overloads("camel")),
	}
}

// envs are the base environments of the kind (cluster, namespaced), built
// on first use from the engine's environment.
var envs struct {
	mu sync.Mutex
	m  map[*celenv.Env]*[2]celenv.Pair
}

// baseEnv returns the environment of GeneratingPolicies: the policy
// environment of the engine (the request's inputs, `variables`,
// `exceptions`, Kyverno's libraries) with the generator library.
func baseEnv(env *celenv.Env, namespaced bool) (celenv.Pair, error) {
	envs.mu.Lock()
	defer envs.mu.Unlock()
	i := 0
	if namespaced {
		i = 1
	}
	if p, ok := envs.m[env]; ok && p[i].Tracked != nil {
		return p[i], nil
	}
	base := env.Base(namespaced)
	var p celenv.Pair
	var err error
	if p.Tracked, err = base.Tracked.Extend(generatorOptions(namespaced)...); err != nil {
		return celenv.Pair{}, fmt.Errorf("building the generating policy environment: %w", err)
	}
	if p.Fast, err = base.Fast.Extend(generatorOptions(namespaced)...); err != nil {
		return celenv.Pair{}, fmt.Errorf("building the generating policy environment: %w", err)
	}
	if envs.m == nil {
		envs.m = map[*celenv.Env]*[2]celenv.Pair{}
	}
	if envs.m[env] == nil {
		envs.m[env] = &[2]celenv.Pair{}
	}
	envs.m[env][i] = p
	return p, nil
}
