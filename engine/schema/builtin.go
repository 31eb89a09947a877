package schema

import (
	"fmt"
	"sync"

	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// builtinKind is one row of the generated table of client-go's scheme kinds.
type builtinKind struct {
	group, version, kind string
	// typeName is the schema type name, runtime.Scheme.ToOpenAPIDefinitionName.
	typeName string
	// inSchema: builtinSchemaYAML has a type of that name (the scheme also has
	// options, lists and meta kinds that it does not describe).
	inSchema bool
}

var (
	builtinKindsOnce sync.Once
	builtinKindIndex map[k8sschema.GroupVersionKind]*builtinKind

	builtinParserOnce sync.Once
	builtinParser     *typed.Parser
	builtinParserErr  error
)

func builtinKindsByGVK() map[k8sschema.GroupVersionKind]*builtinKind {
	builtinKindsOnce.Do(func() {
		m := make(map[k8sschema.GroupVersionKind]*builtinKind, len(builtinKinds))
		for i := range builtinKinds {
			k := &builtinKinds[i]
			m[k8sschema.GroupVersionKind{Group: k.group, Version: k.version, Kind: k.kind}] = k
		}
		builtinKindIndex = m
	})
	return builtinKindIndex
}

// parsedBuiltin parses builtinSchemaYAML once (the first call takes a few
// tens of milliseconds).
func parsedBuiltin() (*typed.Parser, error) {
	builtinParserOnce.Do(func() {
		builtinParser, builtinParserErr = typed.NewParser(typed.YAMLObject(builtinSchemaYAML))
		if builtinParserErr != nil {
			builtinParserErr = fmt.Errorf("the built-in schema (client-go %s) does not parse: %w", clientGoVersion, builtinParserErr)
		}
	})
	return builtinParser, builtinParserErr
}

// LoadBuiltin parses the built-in schema now, rather than at the first
// conversion (it takes 0.1–0.2 s of CPU, once per process), and says whether
// it parses. A server calls it at start-up.
func LoadBuiltin() error {
	_, err := parsedBuiltin()
	return err
}

// BuiltinTypeName is the schema type name of a kind of client-go's scheme
// (what runtime.Scheme.ToOpenAPIDefinitionName gives), and whether the
// built-in schema describes it. ok is false for a kind the scheme does not
// know.
func BuiltinTypeName(gvk k8sschema.GroupVersionKind) (name string, inSchema, ok bool) {
	k := builtinKindsByGVK()[gvk]
	if k == nil {
		return "", false, false
	}
	return k.typeName, k.inSchema, true
}

// IsBuiltin says whether gvk is a kind of client-go's scheme that the built-in
// schema describes (one Builtin can convert).
func IsBuiltin(gvk k8sschema.GroupVersionKind) bool {
	k := builtinKindsByGVK()[gvk]
	return k != nil && k.inSchema
}

// BuiltinClientGoVersion is the version of k8s.io/client-go the built-in
// schemas were copied from.
func BuiltinClientGoVersion() string { return clientGoVersion }

// Builtin is the type converter of the built-in Kubernetes kinds. It behaves
// as client-go's applyconfigurations.NewTypeConverter(scheme.Scheme) of the
// same version: same schema, same kinds, same errors. The schema is parsed on
// first use; the converter is safe for concurrent use.
func Builtin() managedfields.TypeConverter { return builtinConverter{} }

type builtinConverter struct{}

var _ managedfields.TypeConverter = builtinConverter{}

// openAPIName is runtime.Scheme.ToOpenAPIDefinitionName for client-go's scheme.
func openAPIName(gvk k8sschema.GroupVersionKind) (string, error) {
	if gvk.Version == "" {
		return "", fmt.Errorf("version is required on all types: %v", gvk)
	}
	if k := builtinKindsByGVK()[gvk]; k != nil {
		return k.typeName, nil
	}
	if name, ok := builtinUnversionedKinds[gvk.Kind]; ok {
		return name, nil
	}
	return "", runtime.NewNotRegisteredErrForKind(clientGoSchemeName, gvk)
}

func (builtinConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	name, err := openAPIName(obj.GetObjectKind().GroupVersionKind())
	if err != nil {
		return nil, err
	}
	p, err := parsedBuiltin()
	if err != nil {
		return nil, err
	}
	t := p.Type(name)
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return t.FromUnstructured(o.UnstructuredContent(), opts...)
	default:
		return t.FromStructured(obj, opts...)
	}
}

func (builtinConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	return valueToObject(value)
}

// valueToObject is managedfields' TypedToObject, common to its converters.
func valueToObject(value *typed.TypedValue) (runtime.Object, error) {
	vu := value.AsValue().Unstructured()
	switch o := vu.(type) {
	case map[string]interface{}:
		return &unstructured.Unstructured{Object: o}, nil
	default:
		return nil, fmt.Errorf("failed to convert value to unstructured for type %T", vu)
	}
}
