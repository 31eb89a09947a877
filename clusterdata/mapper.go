package clusterdata

import (
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// BuiltinResource is one row of the built-in discovery data: a kind of a
// Kubernetes API group at one version, its resource (plural) name and
// scope, and whether the version is the group's preferred one.
type BuiltinResource struct {
	Group, Version, Kind, Resource string
	Namespaced, Preferred          bool
}

// BuiltinResources returns the discovery data the Kyverno CLI maps kinds to
// resources with when it has no cluster (Kyverno 1.19.1's
// data/api-group-resources.json). The slice is shared: do not modify it.
func BuiltinResources() []BuiltinResource { return builtinResources }

// Mapping is what the REST mapping knows of one kind: its resource (plural)
// name, its scope and the versions it is served at, preferred first.
type Mapping struct {
	GroupKind  schema.GroupKind
	Resource   string
	Namespaced bool
	Versions   []string
	// Source says where the mapping comes from: "builtin",
	// "CustomResourceDefinition <name>", or "guessed" (objects of a kind
	// that neither knows, whose resource is the kind's lower-case plural,
	// as Kyverno's fake cluster client guesses it).
	Source string
}

func (m *Mapping) hasVersion(v string) bool { return slices.Contains(m.Versions, v) }

// Mapper maps kinds to resources and back (a discovery REST mapper without
// discovery): the built-in kinds, the CustomResourceDefinitions among the
// context objects, and the kinds of context objects neither knows. It is
// immutable.
type Mapper struct {
	byKind     map[schema.GroupKind]*Mapping
	byResource map[schema.GroupResource]*Mapping
	// base answers what the maps above do not (the built-in mapper).
	base *Mapper
}

var builtinMapper = sync.OnceValue(func() *Mapper {
	m := &Mapper{byKind: map[schema.GroupKind]*Mapping{}, byResource: map[schema.GroupResource]*Mapping{}}
	for _, r := range builtinResources {
		gk := schema.GroupKind{Group: r.Group, Kind: r.Kind}
		mp := m.byKind[gk]
		if mp == nil {
			mp = &Mapping{GroupKind: gk, Resource: r.Resource, Namespaced: r.Namespaced, Source: "builtin"}
			m.byKind[gk] = mp
			m.byResource[schema.GroupResource{Group: r.Group, Resource: r.Resource}] = mp
		}
		if r.Preferred {
			mp.Versions = append([]string{r.Version}, mp.Versions...)
		} else {
			mp.Versions = append(mp.Versions, r.Version)
		}
	}
	return m
})

// BuiltinMapper returns the mapper of the built-in kinds alone.
func BuiltinMapper() *Mapper { return builtinMapper() }

// KindFor returns the mapping of a kind.
func (m *Mapper) KindFor(gk schema.GroupKind) (*Mapping, bool) {
	for ; m != nil; m = m.base {
		if mp, ok := m.byKind[gk]; ok {
			return mp, true
		}
	}
	return nil, false
}

// ResourceFor returns the mapping of a resource (plural name, no
// subresource).
func (m *Mapper) ResourceFor(gr schema.GroupResource) (*Mapping, bool) {
	for ; m != nil; m = m.base {
		if mp, ok := m.byResource[gr]; ok {
			return mp, true
		}
	}
	return nil, false
}

// crdInfo is the part of a CustomResourceDefinition the mapper reads.
type crdInfo struct {
	name       string
	group      string
	kind       string
	plural     string
	namespaced bool
	versions   []string // served, storage version first
}

// parseCRD reads a CustomResourceDefinition's names, scope and served
// versions (apiextensions.k8s.io/v1 and v1beta1 shapes). ok is false when
// it lacks what a mapping needs.
func parseCRD(name string, content map[string]any) (crdInfo, bool) {
	spec, _ := content["spec"].(map[string]any)
	names, _ := spec["names"].(map[string]any)
	c := crdInfo{name: name}
	c.group, _ = spec["group"].(string)
	c.kind, _ = names["kind"].(string)
	c.plural, _ = names["plural"].(string)
	scope, _ := spec["scope"].(string)
	c.namespaced = scope != "Cluster"
	var storage string
	if vs, ok := spec["versions"].([]any); ok {
		for _, v := range vs {
			vm, _ := v.(map[string]any)
			n, _ := vm["name"].(string)
			if n == "" {
				continue
			}
			if served, ok := vm["served"].(bool); ok && !served {
				continue
			}
			if st, _ := vm["storage"].(bool); st && storage == "" {
				storage = n
				continue
			}
			c.versions = append(c.versions, n)
		}
	}
	if v, ok := spec["version"].(string); ok && v != "" && !slices.Contains(c.versions, v) && v != storage {
		c.versions = append(c.versions, v)
	}
	if storage != "" {
		c.versions = append([]string{storage}, c.versions...)
	}
	if c.group == "" || c.kind == "" || c.plural == "" || len(c.versions) == 0 {
		return c, false
	}
	return c, true
}

// kindVersions are the versions objects of a kind are stored at.
type kindVersions struct {
	gk         schema.GroupKind
	versions   []string
	namespaced bool
}

// newMapper builds the mapper of a view: CRDs first (a CRD of a built-in
// group and kind does not override it), then guesses for the kinds of
// stored objects that no mapping knows, then the versions stored objects
// use are added to the mapping of their kind (objects are served at the
// version they are stored at, whatever a CRD says).
func newMapper(crds []crdInfo, kinds []kindVersions) *Mapper {
	base := builtinMapper()
	m := &Mapper{byKind: map[schema.GroupKind]*Mapping{}, byResource: map[schema.GroupResource]*Mapping{}, base: base}
	sort.Slice(crds, func(i, j int) bool { return crds[i].name < crds[j].name })
	for _, c := range crds {
		gk := schema.GroupKind{Group: c.group, Kind: c.kind}
		gr := schema.GroupResource{Group: c.group, Resource: c.plural}
		if _, ok := m.KindFor(gk); ok {
			continue
		}
		if _, ok := m.ResourceFor(gr); ok {
			continue
		}
		mp := &Mapping{GroupKind: gk, Resource: c.plural, Namespaced: c.namespaced, Versions: c.versions, Source: "CustomResourceDefinition " + c.name}
		m.byKind[gk] = mp
		m.byResource[gr] = mp
	}
	for _, k := range kinds {
		mp, ok := m.KindFor(k.gk)
		if !ok {
			gvr, _ := meta.UnsafeGuessKindToResource(k.gk.WithVersion(""))
			gr := gvr.GroupResource()
			if _, taken := m.ResourceFor(gr); taken {
				continue // served under no resource: Get and List cannot name it
			}
			mp = &Mapping{GroupKind: k.gk, Resource: gr.Resource, Namespaced: k.namespaced, Versions: slices.Clone(k.versions), Source: "guessed"}
			m.byKind[k.gk] = mp
			m.byResource[gr] = mp
			continue
		}
		var extra []string
		for _, v := range k.versions {
			if !mp.hasVersion(v) {
				extra = append(extra, v)
			}
		}
		if len(extra) > 0 {
			cp := *mp
			cp.Versions = append(slices.Clone(mp.Versions), extra...)
			m.byKind[k.gk] = &cp
			m.byResource[schema.GroupResource{Group: k.gk.Group, Resource: mp.Resource}] = &cp
		}
	}
	return m
}

// splitResource splits "pods/status" into the resource and subresource.
func splitResource(resource string) (string, string) {
	if i := strings.IndexByte(resource, '/'); i >= 0 {
		return resource[:i], resource[i+1:]
	}
	return resource, ""
}
