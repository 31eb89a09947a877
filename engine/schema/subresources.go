package schema

import (
	"cmp"
	"slices"
	"sync"

	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// Subresource bodies.
//
// client-go's schema (Builtin) describes the kinds that have apply
// configurations, which leaves out the bodies of some subresource requests
// that admission policies see, such as the v1 Binding of pods/binding. The
// API server's OpenAPI describes them, and so do the built-in OpenAPI
// documents the Kyverno CLI merges apply configurations with
// (kubectl-validate's). subresourceKinds describes those Arbiter knows, in
// terms of the built-in schema's types; SubresourceBody converts them.

// subresourceKinds are the subresource body kinds described here, by kind,
// with their type definitions (as the API server's OpenAPI v3 describes
// them).
var subresourceKinds = map[k8sschema.GroupVersionKind]smdschema.TypeDef{
	// io.k8s.api.core.v1.Binding: the body of pods/binding.
	{Version: "v1", Kind: "Binding"}: {
		Name: "io.k8s.api.core.v1.Binding",
		Atom: smdschema.Atom{Map: &smdschema.Map{Fields: []smdschema.StructField{
			{Name: "apiVersion", Type: scalarRef(smdschema.String)},
			{Name: "kind", Type: scalarRef(smdschema.String)},
			{Name: "metadata", Type: namedRef("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"), Default: map[string]any{}},
			{Name: "target", Type: namedRef("io.k8s.api.core.v1.ObjectReference"), Default: map[string]any{}},
		}}},
	},
}

func scalarRef(s smdschema.Scalar) smdschema.TypeRef {
	return smdschema.TypeRef{Inlined: smdschema.Atom{Scalar: &s}}
}

func namedRef(name string) smdschema.TypeRef { return smdschema.TypeRef{NamedType: &name} }

var (
	subresourceParserOnce sync.Once
	subresourceParser     *typed.Parser
	subresourceParserErr  error
)

// parsedSubresources is the built-in schema with the subresource body
// types added (it shares the built-in schema's types).
func parsedSubresources() (*typed.Parser, error) {
	subresourceParserOnce.Do(func() {
		base, err := parsedBuiltin()
		if err != nil {
			subresourceParserErr = err
			return
		}
		types := slices.Clip(base.Schema.Types)
		for _, gvk := range sortedGVKs() {
			types = append(types, subresourceKinds[gvk])
		}
		subresourceParser = &typed.Parser{Schema: smdschema.Schema{Types: types}}
	})
	return subresourceParser, subresourceParserErr
}

func sortedGVKs() []k8sschema.GroupVersionKind {
	out := make([]k8sschema.GroupVersionKind, 0, len(subresourceKinds))
	for gvk := range subresourceKinds {
		out = append(out, gvk)
	}
	slices.SortFunc(out, func(a, b k8sschema.GroupVersionKind) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Version, b.Version), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// SubresourceBody is the type converter of a subresource body kind that
// the built-in schema does not describe (see subresourceKinds), or nil.
func SubresourceBody(gvk k8sschema.GroupVersionKind) managedfields.TypeConverter {
	if _, ok := subresourceKinds[gvk]; !ok {
		return nil
	}
	return subresourceConverter{}
}

type subresourceConverter struct{}

var _ managedfields.TypeConverter = subresourceConverter{}

func (subresourceConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	def, ok := subresourceKinds[gvk]
	if !ok {
		return nil, runtime.NewNotRegisteredErrForKind(clientGoSchemeName, gvk)
	}
	p, err := parsedSubresources()
	if err != nil {
		return nil, err
	}
	t := p.Type(def.Name)
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return t.FromUnstructured(o.UnstructuredContent(), opts...)
	default:
		return t.FromStructured(obj, opts...)
	}
}

func (subresourceConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	return valueToObject(value)
}
