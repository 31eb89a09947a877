package schema

import (
	"fmt"

	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

var deduced = managedfields.NewDeducedTypeConverter()

// Deduced is the schema-less converter (managedfields.NewDeducedTypeConverter):
// every map is granular and every list atomic. It is what the Kyverno CLI uses
// for MutatingAdmissionPolicies; use it only where such a fallback is asked
// for explicitly.
func Deduced() managedfields.TypeConverter { return deduced }

// Schemas are the type converters of the built-in kinds and of a set of
// custom resources. A nil *Schemas knows the built-in kinds only. Schemas are
// immutable and safe for concurrent use.
type Schemas struct {
	crds   map[k8sschema.GroupVersionKind]*CRDConverter
	byName map[string]*CRDConverter
	order  []*CRDConverter
}

// NewSchemas builds the converters of the CRDs (apiextensions.k8s.io/v1
// CustomResourceDefinitions, JSON-shaped). Errors (manifest.LoadErrors) name
// each CRD and field; two CRDs that define the same group, version and kind
// are an error. A CRD that defines a built-in kind is ignored for that kind:
// the built-in schema wins, as in kube-apiserver, which serves built-in
// groups itself.
func NewSchemas(crds ...map[string]any) (*Schemas, error) {
	s := &Schemas{crds: map[k8sschema.GroupVersionKind]*CRDConverter{}, byName: map[string]*CRDConverter{}}
	var errs manifest.LoadErrors
	for _, crd := range crds {
		c, err := NewCRDConverter(crd)
		if err != nil {
			if le := manifest.AsLoadErrors(err); le != nil {
				errs = append(errs, le...)
			} else {
				errs = append(errs, &manifest.LoadError{Object: "CustomResourceDefinition", Detail: err.Error()})
			}
			continue
		}
		object := "CustomResourceDefinition " + c.name
		if prev := s.byName[c.name]; prev != nil {
			errs = append(errs, &manifest.LoadError{Object: object, Field: "metadata.name", Detail: "Duplicate value: the CustomResourceDefinition is given twice"})
			continue
		}
		conflict := false
		for i, gvk := range c.GroupVersionKinds() {
			if prev := s.crds[gvk]; prev != nil {
				errs = append(errs, &manifest.LoadError{Object: object, Field: fmt.Sprintf("spec.versions[%s]", c.versions[i]),
					Detail: fmt.Sprintf("%s is also defined by CustomResourceDefinition %s", gvk, prev.name)})
				conflict = true
			}
		}
		if conflict {
			continue
		}
		for _, gvk := range c.GroupVersionKinds() {
			s.crds[gvk] = c
		}
		s.byName[c.name] = c
		s.order = append(s.order, c)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// For is the converter of gvk: the built-in one for a kind of client-go's
// scheme that the built-in schema describes, else that of a subresource
// body it does not describe (SubresourceBody), else the converter of the
// CRD that defines it, else nil (never the deduced converter: see Deduced).
func (s *Schemas) For(gvk k8sschema.GroupVersionKind) managedfields.TypeConverter {
	if IsBuiltin(gvk) {
		return Builtin()
	}
	if c := SubresourceBody(gvk); c != nil {
		return c
	}
	if s != nil {
		if c := s.crds[gvk]; c != nil {
			return c
		}
	}
	return nil
}

// Deduced is the schema-less converter (see the package function Deduced).
func (s *Schemas) Deduced() managedfields.TypeConverter { return deduced }

// CRD is the converter of the CRD of that name, or nil.
func (s *Schemas) CRD(name string) *CRDConverter {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// CRDs are the CRDs' converters, in the order given.
func (s *Schemas) CRDs() []*CRDConverter {
	if s == nil {
		return nil
	}
	return append([]*CRDConverter(nil), s.order...)
}
