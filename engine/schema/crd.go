package schema

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// CRDGroupVersion is the apiVersion of the CustomResourceDefinitions
// NewCRDConverter reads.
const CRDGroupVersion = "apiextensions.k8s.io/v1"

const (
	objectMetaType = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
	// objectMetaRef is how kube-apiserver's OpenAPI v3 document of a custom
	// resource refers to ObjectMeta (apiextensions-apiserver's
	// controller/openapi/builder).
	objectMetaRef = "#/components/schemas/" + objectMetaType

	extGVK                   = "x-kubernetes-group-version-kind"
	extPreserveUnknownFields = "x-kubernetes-preserve-unknown-fields"
	extEmbeddedResource      = "x-kubernetes-embedded-resource"
	extIntOrString           = "x-kubernetes-int-or-string"
	extListType              = "x-kubernetes-list-type"
	extListMapKeys           = "x-kubernetes-list-map-keys"
	extMapType               = "x-kubernetes-map-type"
)

var (
	objectMetaTypesOnce sync.Once
	objectMetaTypes     []smdschema.TypeDef
	objectMetaTypesErr  error
)

// metaTypes are the types of ObjectMeta and those it refers to, from the
// built-in schema (objectMetaSchemaYAML, a verbatim part of it).
func metaTypes() ([]smdschema.TypeDef, error) {
	objectMetaTypesOnce.Do(func() {
		p, err := typed.NewParser(typed.YAMLObject(objectMetaSchemaYAML))
		if err != nil {
			objectMetaTypesErr = fmt.Errorf("the ObjectMeta schema (client-go %s) does not parse: %w", clientGoVersion, err)
			return
		}
		objectMetaTypes = p.Schema.Types
	})
	return objectMetaTypes, objectMetaTypesErr
}

// CRDConverter is the type converter of the custom resources one
// CustomResourceDefinition defines: one type per served version, built as
// kube-apiserver builds the OpenAPI v3 schema it publishes for them
// (apiextensions-apiserver's controller/openapi/builder, BuildOpenAPIV3) and
// as managedfields.NewTypeConverter converts that to a structured-merge-diff
// schema:
//
//   - the version's spec.versions[].schema.openAPIV3Schema, honouring
//     x-kubernetes-list-type, x-kubernetes-list-map-keys,
//     x-kubernetes-map-type, x-kubernetes-preserve-unknown-fields and
//     x-kubernetes-int-or-string (kube-openapi's schemaconv);
//   - metadata is ObjectMeta (whatever the CRD's schema says of it), apiVersion
//     and kind are strings;
//   - every object marked x-kubernetes-embedded-resource gets apiVersion, kind
//     and metadata (ObjectMeta) properties;
//   - the x-kubernetes-group-version-kind extension names the kind.
//
// ObjectMeta's schema is the built-in one (client-go's). A CRDConverter is
// immutable and safe for concurrent use.
type CRDConverter struct {
	name     string
	group    string
	kind     string
	versions []string
	types    map[k8sschema.GroupVersionKind]*typed.ParseableType
	compiler *compiler
}

var _ managedfields.TypeConverter = (*CRDConverter)(nil)

// Name is the CRD's metadata.name.
func (c *CRDConverter) Name() string { return c.name }

// GroupVersionKinds are the kinds the converter knows: the CRD's kind in each
// served version, in the CRD's order.
func (c *CRDConverter) GroupVersionKinds() []k8sschema.GroupVersionKind {
	out := make([]k8sschema.GroupVersionKind, len(c.versions))
	for i, v := range c.versions {
		out[i] = k8sschema.GroupVersionKind{Group: c.group, Version: v, Kind: c.kind}
	}
	return out
}

// ObjectToTyped converts an object of one of the CRD's served versions, as the
// converter of managedfields.NewTypeConverter does (same errors).
func (c *CRDConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	t := c.types[gvk]
	if t == nil {
		return nil, fmt.Errorf("no corresponding type for %v", gvk)
	}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return t.FromUnstructured(o.UnstructuredContent(), opts...)
	default:
		return t.FromStructured(obj, opts...)
	}
}

// TypedToObject converts a typed value back to an unstructured object.
func (c *CRDConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	return valueToObject(value)
}

// crdLoader reads a CRD and collects its errors, each naming the field.
type crdLoader struct {
	object string
	errs   manifest.LoadErrors
}

func (l *crdLoader) errorf(field, format string, args ...any) {
	l.errs = append(l.errs, &manifest.LoadError{Object: l.object, Field: field, Detail: fmt.Sprintf(format, args...)})
}

// NewCRDConverter builds the type converter of the custom resources a
// CustomResourceDefinition (apiextensions.k8s.io/v1, JSON-shaped) defines, for
// each of its served versions. Errors are manifest.LoadErrors naming the CRD
// ("CustomResourceDefinition name") and the field.
func NewCRDConverter(crd map[string]any) (*CRDConverter, error) {
	name, _ := nested(crd, "metadata", "name").(string)
	l := &crdLoader{object: "CustomResourceDefinition " + name}
	if name == "" {
		l.object = "CustomResourceDefinition"
		l.errorf("metadata.name", "Required value")
	}
	if av, _ := crd["apiVersion"].(string); av != CRDGroupVersion {
		l.errorf("apiVersion", "must be %s, not %q", CRDGroupVersion, av)
	}
	if k, _ := crd["kind"].(string); k != "CustomResourceDefinition" {
		l.errorf("kind", "must be CustomResourceDefinition, not %q", k)
	}
	group := requiredString(l, crd, "spec.group", "spec", "group")
	kind := requiredString(l, crd, "spec.names.kind", "spec", "names", "kind")
	c := &CRDConverter{name: name, group: group, kind: kind, types: map[k8sschema.GroupVersionKind]*typed.ParseableType{}}

	versions, ok := nested(crd, "spec", "versions").([]any)
	if !ok || len(versions) == 0 {
		l.errorf("spec.versions", "must have at least one version")
	}
	models := map[string]*spec.Schema{}
	seen := map[string]bool{}
	for i, v := range versions {
		field := fmt.Sprintf("spec.versions[%d]", i)
		vm, ok := v.(map[string]any)
		if !ok {
			l.errorf(field, "must be an object")
			continue
		}
		vname, _ := vm["name"].(string)
		if vname == "" {
			l.errorf(field+".name", "Required value")
			continue
		}
		if seen[vname] {
			l.errorf(field+".name", "Duplicate value: %q", vname)
			continue
		}
		seen[vname] = true
		served, ok := vm["served"].(bool)
		if !ok {
			l.errorf(field+".served", "Required value: must be true or false")
			continue
		}
		if !served {
			continue
		}
		sfield := field + ".schema.openAPIV3Schema"
		raw, ok := nested(vm, "schema", "openAPIV3Schema").(map[string]any)
		if !ok {
			l.errorf(sfield, "Required value: a served version needs a schema")
			continue
		}
		n := len(l.errs)
		s := toSpec(l, sfield, raw)
		if len(l.errs) > n || group == "" || kind == "" {
			continue
		}
		buildKubeNative(s, group, vname, kind)
		models[modelName(group, vname, kind)] = s
		c.versions = append(c.versions, vname)
	}
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	if len(models) == 0 {
		// No served version: a converter that knows no kind.
		return c, nil
	}
	conv, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		// toSpec checks what schemaconv checks; this should not happen.
		l.errorf("spec.versions", "schema conversion failed: %v", err)
		return nil, l.errs
	}
	meta, err := metaTypes()
	if err != nil {
		return nil, err
	}
	types := conv.Types
	have := make(map[string]bool, len(types))
	for _, t := range types {
		have[t.Name] = true
	}
	for _, t := range meta {
		if !have[t.Name] {
			types = append(types, t)
		}
	}
	parser := &typed.Parser{Schema: smdschema.Schema{Types: types}}
	c.compiler = newCompiler(&parser.Schema)
	// As managedfields' indexModels: the kinds named by the extension.
	for name, model := range models {
		for _, gvk := range gvksOf(model.Extensions) {
			t := parser.Type(name)
			c.types[gvk] = &t
		}
	}
	return c, nil
}

// modelName is kube-apiserver's OpenAPI name of a custom resource's schema
// (builder.gvkToModelName): the group reversed, the version, the kind.
func modelName(group, version, kind string) string {
	parts := strings.Split(group, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".") + "." + version + "." + kind
}

// buildKubeNative adds to a version's schema what kube-apiserver adds to it
// (builder.buildKubeNative, OpenAPI v3): metadata is ObjectMeta, apiVersion
// and kind are strings, embedded resources get the same, and the
// group-version-kind extension.
func buildKubeNative(s *spec.Schema, group, version, kind string) {
	s.SetProperty("metadata", *spec.RefSchema(objectMetaRef))
	addTypeMeta(s)
	addEmbeddedProperties(s)
	s.AddExtension(extGVK, []any{map[string]any{"group": group, "version": version, "kind": kind}})
}

func addTypeMeta(s *spec.Schema) {
	s.SetProperty("apiVersion", *spec.StringProperty())
	s.SetProperty("kind", *spec.StringProperty())
}

// addEmbeddedProperties is the builder's, for OpenAPI v3.
func addEmbeddedProperties(s *spec.Schema) {
	if s == nil {
		return
	}
	for k := range s.Properties {
		v := s.Properties[k]
		addEmbeddedProperties(&v)
		s.Properties[k] = v
	}
	if s.Items != nil {
		addEmbeddedProperties(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		addEmbeddedProperties(s.AdditionalProperties.Schema)
	}
	if embedded, ok := s.Extensions.GetBool(extEmbeddedResource); ok && embedded {
		addTypeMeta(s)
		s.SetProperty("metadata", *spec.RefSchema(objectMetaRef))
	}
}

// gvksOf is managedfields' parseGroupVersionKind for the extension
// buildKubeNative sets.
func gvksOf(ext spec.Extensions) []k8sschema.GroupVersionKind {
	list, _ := ext[extGVK].([]any)
	var out []k8sschema.GroupVersionKind
	for _, e := range list {
		m, _ := e.(map[string]any)
		g, ok1 := m["group"].(string)
		v, ok2 := m["version"].(string)
		k, ok3 := m["kind"].(string)
		if ok1 && ok2 && ok3 && k != "" {
			out = append(out, k8sschema.GroupVersionKind{Group: g, Version: v, Kind: k})
		}
	}
	return out
}

// toSpec reads a JSONSchemaProps (JSON-shaped) into the parts of an OpenAPI
// schema that the structured-merge-diff conversion reads: type, format,
// nullable, default, properties, additionalProperties, items and the
// x-kubernetes extensions. Validations (pattern, enum, anyOf, CEL rules…) do
// not shape a merge and are ignored, as schemaconv ignores them.
func toSpec(l *crdLoader, field string, m map[string]any) *spec.Schema {
	s := &spec.Schema{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // errors in a stable order
	for _, k := range keys {
		v := m[k]
		f := field + "." + k
		switch k {
		case "$ref":
			l.errorf(f, "Forbidden: $ref is not allowed in a CustomResourceDefinition schema")
		case "type":
			t, ok := v.(string)
			switch {
			case !ok:
				l.errorf(f, "must be a string")
			case t == "object", t == "array", t == "string", t == "integer", t == "number", t == "boolean":
				s.Type = spec.StringOrArray{t}
			case t == "":
			default:
				l.errorf(f, "Unsupported value: %q: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"", t)
			}
		case "format":
			if t, ok := v.(string); ok {
				s.Format = t
			} else {
				l.errorf(f, "must be a string")
			}
		case "nullable":
			if b, ok := v.(bool); ok {
				s.Nullable = b
			} else {
				l.errorf(f, "must be a boolean")
			}
		case "default":
			s.Default = v
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				l.errorf(f, "must be an object")
				continue
			}
			s.Properties = make(map[string]spec.Schema, len(props))
			for name, p := range props {
				pf := f + "[" + name + "]"
				pm, ok := p.(map[string]any)
				if !ok {
					l.errorf(pf, "must be an object")
					continue
				}
				s.Properties[name] = *toSpec(l, pf, pm)
			}
		case "additionalProperties":
			switch a := v.(type) {
			case bool:
				s.AdditionalProperties = &spec.SchemaOrBool{Allows: a}
			case map[string]any:
				s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: toSpec(l, f, a)}
			default:
				l.errorf(f, "must be a boolean or an object")
			}
		case "items":
			switch a := v.(type) {
			case map[string]any:
				s.Items = &spec.SchemaOrArray{Schema: toSpec(l, f, a)}
			case []any:
				l.errorf(f, "Forbidden: items must be a schema object and not an array")
			default:
				l.errorf(f, "must be an object")
			}
		case extPreserveUnknownFields, extEmbeddedResource, extIntOrString:
			b, ok := v.(bool)
			if !ok {
				l.errorf(f, "must be a boolean")
			} else if b {
				// kube-apiserver publishes these only when true.
				s.AddExtension(k, true)
			}
		case extListType:
			t, _ := v.(string)
			switch t {
			case "atomic", "set", "map":
				s.AddExtension(k, t)
			default:
				l.errorf(f, "Unsupported value: %s: supported values: \"atomic\", \"map\", \"set\"", quoteValue(v))
			}
		case extListMapKeys:
			list, ok := v.([]any)
			if !ok {
				if strs, isStrs := v.([]string); isStrs {
					list = make([]any, len(strs))
					for i, s := range strs {
						list[i] = s
					}
					ok = true
				}
			}
			if !ok {
				l.errorf(f, "must be a list of strings")
				continue
			}
			mapKeys := make([]any, len(list))
			for i, e := range list {
				if _, ok := e.(string); !ok {
					l.errorf(fmt.Sprintf("%s[%d]", f, i), "must be a string")
				}
				mapKeys[i] = e
			}
			if len(mapKeys) > 0 {
				s.AddExtension(k, mapKeys)
			}
		case extMapType:
			t, _ := v.(string)
			switch t {
			case "atomic", "granular":
				s.AddExtension(k, t)
			default:
				l.errorf(f, "Unsupported value: %s: supported values: \"atomic\", \"granular\"", quoteValue(v))
			}
		}
	}
	// What schemaconv requires of list types and keys (kube-apiserver's CRD
	// validation refuses the same).
	if lt, ok := s.Extensions.GetString(extListType); ok {
		isArray := len(s.Type) == 1 && s.Type[0] == "array"
		if !isArray {
			l.errorf(field+"."+extListType, "Invalid value: %q: must only be used if type is array", lt)
		}
		_, hasKeys := s.Extensions[extListMapKeys]
		if lt == "map" && !hasKeys {
			l.errorf(field+"."+extListMapKeys, "Required value: must not be empty if x-kubernetes-list-type is map")
		}
		if lt != "map" && hasKeys {
			l.errorf(field+"."+extListMapKeys, "Forbidden: may only be used if x-kubernetes-list-type is map")
		}
		if lt == "map" && hasKeys && s.Items != nil && s.Items.Schema != nil {
			it := s.Items.Schema
			if len(it.Type) != 1 || it.Type[0] != "object" {
				l.errorf(field+".items.type", "Invalid value: must be object if parent array's x-kubernetes-list-type is map")
			} else {
				keys, _ := s.Extensions[extListMapKeys].([]any)
				for i, key := range keys {
					ks, _ := key.(string)
					if _, ok := it.Properties[ks]; !ok {
						l.errorf(fmt.Sprintf("%s.%s[%d]", field, extListMapKeys, i), "Invalid value: %q: entries must all be names of item properties", ks)
					}
				}
			}
		}
	} else if _, hasKeys := s.Extensions[extListMapKeys]; hasKeys {
		l.errorf(field+"."+extListMapKeys, "Forbidden: may only be used if x-kubernetes-list-type is map")
	}
	if _, ok := s.Extensions[extMapType]; ok && (len(s.Type) != 1 || s.Type[0] != "object") {
		l.errorf(field+"."+extMapType, "Invalid value: must only be used if type is object")
	}
	if len(s.Type) == 1 && s.Type[0] == "array" && s.Items == nil {
		l.errorf(field+".items", "Required value: must be specified for an array")
	}
	return s
}

func quoteValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%v", v)
}

func requiredString(l *crdLoader, m map[string]any, field string, path ...string) string {
	s, _ := nested(m, path...).(string)
	if s == "" {
		l.errorf(field, "Required value")
	}
	return s
}

func nested(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}
