package clusterdata

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/common/types/ref"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Key identifies a context object as the store does: group, kind,
// namespace and name (not the version: one object per key).
type Key struct {
	Group, Kind, Namespace, Name string
}

// KeyOf returns the key of an object.
func KeyOf(o *manifest.Object) Key {
	return Key{Group: o.Group(), Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

func (k Key) String() string {
	gk := k.Kind
	if k.Group != "" {
		gk = k.Kind + "." + k.Group
	}
	if k.Namespace != "" {
		return gk + " " + k.Namespace + "/" + k.Name
	}
	return gk + " " + k.Name
}

// Change is one change to a view: Object is the new object of Key, or nil
// to delete it.
type Change struct {
	Key    Key
	Object *manifest.Object
}

// View is the context objects of one revision, indexed for the resource
// library: by kind, then namespace, then name. It is immutable and safe for
// concurrent use; Apply returns a new view that shares every bucket the
// changes did not touch (copy-on-write per kind and namespace), so a
// commit of a few objects costs in proportion to the buckets they are in,
// not to the whole view.
//
// Objects (and the maps of their content) are shared by every reader: they
// must not be modified.
type View struct {
	kinds  map[schema.GroupKind]*kindBucket
	mapper *Mapper
	count  int
}

// kindBucket holds the objects of one kind, by namespace ("" for
// cluster-scoped objects).
type kindBucket struct {
	gk    schema.GroupKind
	byNS  map[string]*nsBucket
	count int

	// namespaces (sorted) and all (every object, by namespace then name)
	// are derived on first use.
	once       sync.Once
	namespaces []string
	allOnce    sync.Once
	all        []unstructured.Unstructured
	// versions are the versions objects of the kind are stored at, and
	// whether any object has a namespace.
	versions   []string
	namespaced bool
}

// nsBucket holds the objects of one kind in one namespace, sorted by name.
// items[i] wraps objs[i].Content.
type nsBucket struct {
	// names are the objects' names, copied into one string so that a
	// lookup's binary search reads contiguous memory, not each object's.
	names []string
	objs  []*manifest.Object
	items []unstructured.Unstructured
	// vals[i] is the CEL value of objs[i].Content (jsonval.SharedMap), made
	// on its first read and kept by the buckets that keep the object.
	vals []atomic.Pointer[jsonval.Map]
	// labels[i] is objs[i]'s metadata.labels (nil when it has none), for
	// label selection without walking the objects.
	labels []map[string]any
	// versions are the versions its objects are stored at, sorted.
	versions []string
}

var emptyView = &View{kinds: map[schema.GroupKind]*kindBucket{}, mapper: builtinMapper()}

// Empty returns the view without objects.
func Empty() *View { return emptyView }

// New returns a view of objs (the last object of a key wins).
func New(objs []*manifest.Object) *View {
	changes := make([]Change, len(objs))
	for i, o := range objs {
		changes[i] = Change{Key: KeyOf(o), Object: o}
	}
	return Empty().Apply(changes)
}

// Len returns the number of objects.
func (v *View) Len() int {
	if v == nil {
		return 0
	}
	return v.count
}

// Mapper returns the view's REST mapping.
func (v *View) Mapper() *Mapper {
	if v == nil {
		return builtinMapper()
	}
	return v.mapper
}

// Get returns the object of a key.
func (v *View) Get(k Key) (*manifest.Object, bool) {
	if v == nil {
		return nil, false
	}
	b := v.kinds[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
	if b == nil {
		return nil, false
	}
	nb := b.byNS[k.Namespace]
	if nb == nil {
		return nil, false
	}
	if i, ok := nb.find(k.Name); ok {
		return nb.objs[i], true
	}
	return nil, false
}

// CountOf returns the number of objects of a kind.
func (v *View) CountOf(gk schema.GroupKind) int {
	if v == nil {
		return 0
	}
	if b := v.kinds[gk]; b != nil {
		return b.count
	}
	return 0
}

// ObjectsOf returns the objects of a kind, by namespace then name.
func (v *View) ObjectsOf(gk schema.GroupKind) []*manifest.Object {
	if v == nil {
		return nil
	}
	b := v.kinds[gk]
	if b == nil {
		return nil
	}
	b.derive()
	out := make([]*manifest.Object, 0, b.count)
	for _, ns := range b.namespaces {
		out = append(out, b.byNS[ns].objs...)
	}
	return out
}

// Range calls fn for every object in key order (group, kind, namespace,
// name) until fn returns false.
func (v *View) Range(fn func(Key, *manifest.Object) bool) {
	if v == nil {
		return
	}
	gks := make([]schema.GroupKind, 0, len(v.kinds))
	for gk := range v.kinds {
		gks = append(gks, gk)
	}
	slices.SortFunc(gks, func(a, b schema.GroupKind) int {
		if c := cmp.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return cmp.Compare(a.Kind, b.Kind)
	})
	for _, gk := range gks {
		b := v.kinds[gk]
		b.derive()
		for _, ns := range b.namespaces {
			nb := b.byNS[ns]
			for i, name := range nb.names {
				if !fn(Key{Group: gk.Group, Kind: gk.Kind, Namespace: ns, Name: name}, nb.objs[i]) {
					return
				}
			}
		}
	}
}

func (nb *nsBucket) find(name string) (int, bool) {
	i := sort.SearchStrings(nb.names, name)
	return i, i < len(nb.names) && nb.names[i] == name
}

// derive computes the bucket's derived fields once.
func (b *kindBucket) derive() {
	b.once.Do(func() {
		b.namespaces = make([]string, 0, len(b.byNS))
		for ns := range b.byNS {
			b.namespaces = append(b.namespaces, ns)
			if ns != "" {
				b.namespaced = true
			}
		}
		sort.Strings(b.namespaces)
		for _, ns := range b.namespaces {
			for _, v := range b.byNS[ns].versions {
				if !slices.Contains(b.versions, v) {
					b.versions = append(b.versions, v)
				}
			}
		}
		sort.Strings(b.versions)
	})
}

// allItems returns every object of the bucket, by namespace then name.
func (b *kindBucket) allItems() []unstructured.Unstructured {
	b.derive()
	if len(b.namespaces) == 1 {
		return b.byNS[b.namespaces[0]].items
	}
	// Built once per bucket, on the first list of all namespaces.
	b.allOnce.Do(func() {
		all := make([]unstructured.Unstructured, 0, b.count)
		for _, ns := range b.namespaces {
			all = append(all, b.byNS[ns].items...)
		}
		b.all = all
	})
	return b.all
}

// Apply returns the view with changes applied (the last change of a key
// wins; deleting a missing key does nothing). The receiver is unchanged.
// Every upserted object must have the key it is given under.
func (v *View) Apply(changes []Change) *View {
	if v == nil {
		v = emptyView
	}
	if len(changes) == 0 {
		return v
	}
	// Group the changes by kind and namespace, the last change of a key
	// winning.
	type nsKey struct {
		gk schema.GroupKind
		ns string
	}
	byBucket := map[nsKey]map[string]*manifest.Object{}
	crdsChanged := false
	for _, c := range changes {
		k := nsKey{schema.GroupKind{Group: c.Key.Group, Kind: c.Key.Kind}, c.Key.Namespace}
		m := byBucket[k]
		if m == nil {
			m = map[string]*manifest.Object{}
			byBucket[k] = m
		}
		m[c.Key.Name] = c.Object
		if k.gk == crdGK {
			crdsChanged = true
		}
	}
	out := &View{kinds: make(map[schema.GroupKind]*kindBucket, len(v.kinds)+1), count: v.count}
	for gk, b := range v.kinds {
		out.kinds[gk] = b
	}
	copied := map[schema.GroupKind]*kindBucket{}
	kindsChanged := false
	for k, names := range byBucket {
		b := copied[k.gk]
		if b == nil {
			old := out.kinds[k.gk]
			b = &kindBucket{gk: k.gk, byNS: map[string]*nsBucket{}}
			if old != nil {
				b.count = old.count
				for ns, nb := range old.byNS {
					b.byNS[ns] = nb
				}
			}
			copied[k.gk] = b
		}
		old := b.byNS[k.ns]
		nb, delta := old.apply(names)
		b.count += delta
		out.count += delta
		if nb == nil {
			delete(b.byNS, k.ns)
		} else {
			b.byNS[k.ns] = nb
		}
	}
	for gk, b := range copied {
		prev := v.kinds[gk]
		if b.count == 0 {
			delete(out.kinds, gk)
			if prev != nil {
				kindsChanged = true
			}
			continue
		}
		out.kinds[gk] = b
		if prev == nil {
			kindsChanged = true
			continue
		}
		// A kind whose stored versions or scope change changes the mapping.
		prev.derive()
		b.derive()
		if !slices.Equal(prev.versions, b.versions) || prev.namespaced != b.namespaced {
			kindsChanged = true
		}
	}
	if crdsChanged || kindsChanged {
		out.mapper = out.buildMapper()
	} else {
		out.mapper = v.mapper
	}
	return out
}

// apply returns the bucket with the changes of names applied (nil when it
// ends empty) and the change in the number of objects. nb may be nil.
func (nb *nsBucket) apply(changes map[string]*manifest.Object) (*nsBucket, int) {
	names := make([]string, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	sort.Strings(names)
	var oldNames []string
	var oldObjs []*manifest.Object
	var oldItems []unstructured.Unstructured
	var oldVals []atomic.Pointer[jsonval.Map]
	if nb != nil {
		oldNames, oldObjs, oldItems, oldVals = nb.names, nb.objs, nb.items, nb.vals
	}
	size := len(oldNames) + len(names)
	out := &nsBucket{names: make([]string, 0, size), objs: make([]*manifest.Object, 0, size), items: make([]unstructured.Unstructured, 0, size)}
	vals := make([]atomic.Pointer[jsonval.Map], size)
	keep := func(i int) {
		vals[len(out.names)].Store(oldVals[i].Load())
		out.names = append(out.names, oldNames[i])
		out.objs = append(out.objs, oldObjs[i])
		out.items = append(out.items, oldItems[i])
	}
	delta := 0
	i := 0
	for _, n := range names {
		for i < len(oldNames) && oldNames[i] < n {
			keep(i)
			i++
		}
		existed := i < len(oldNames) && oldNames[i] == n
		if existed {
			i++
		}
		o := changes[n]
		switch {
		case o != nil:
			out.names = append(out.names, n)
			out.objs = append(out.objs, o)
			out.items = append(out.items, unstructured.Unstructured{Object: o.Content})
			if !existed {
				delta++
			}
		case existed:
			delta--
		}
	}
	for ; i < len(oldNames); i++ {
		keep(i)
	}
	if len(out.names) == 0 {
		return nil, delta
	}
	out.vals = vals[:len(out.names)]
	packNames(out.names)
	out.labels = make([]map[string]any, len(out.objs))
	for i, o := range out.objs {
		if v := o.VersionOnly(); !slices.Contains(out.versions, v) {
			out.versions = append(out.versions, v)
		}
		md, _ := o.Content["metadata"].(map[string]any)
		out.labels[i], _ = md["labels"].(map[string]any)
	}
	sort.Strings(out.versions)
	return out, delta
}

// packNames makes names slices of one string holding them all.
func packNames(names []string) {
	n := 0
	for _, s := range names {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range names {
		b.WriteString(s)
	}
	all := b.String()
	off := 0
	for i, s := range names {
		names[i] = all[off : off+len(s)]
		off += len(s)
	}
}

// value returns the CEL value of the i-th object, made once.
func (nb *nsBucket) value(i int) *jsonval.Map {
	p := &nb.vals[i]
	if m := p.Load(); m != nil {
		return m
	}
	m := jsonval.SharedMap(nb.objs[i].Content)
	if p.CompareAndSwap(nil, m) {
		return m
	}
	return p.Load()
}

var crdGK = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// buildMapper builds the view's mapper from its CRDs and the kinds of its
// objects.
func (v *View) buildMapper() *Mapper {
	var crds []crdInfo
	if b := v.kinds[crdGK]; b != nil {
		for _, o := range v.ObjectsOf(crdGK) {
			if c, ok := parseCRD(o.Name, o.Content); ok {
				crds = append(crds, c)
			}
		}
	}
	kinds := make([]kindVersions, 0, len(v.kinds))
	for gk, b := range v.kinds {
		b.derive()
		kinds = append(kinds, kindVersions{gk: gk, versions: b.versions, namespaced: b.namespaced})
	}
	slices.SortFunc(kinds, func(a, b kindVersions) int {
		if c := cmp.Compare(a.gk.Group, b.gk.Group); c != 0 {
			return c
		}
		return cmp.Compare(a.gk.Kind, b.gk.Kind)
	})
	return newMapper(crds, kinds)
}

// ---- the resource library (kyvernocel.ResourceContext without Post) ----

// resolve maps an API version and resource to the mapping and the bucket
// of its objects (nil when there are none).
func (v *View) resolve(apiVersion, resource string) (*Mapping, *kindBucket, schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, nil, schema.GroupVersionResource{}, err
	}
	res, _ := splitResource(resource)
	gvr := gv.WithResource(res)
	mp, ok := v.Mapper().ResourceFor(gvr.GroupResource())
	if !ok || !mp.hasVersion(gv.Version) {
		return nil, nil, gvr, nil
	}
	if v == nil {
		return mp, nil, gvr, nil
	}
	return mp, v.kinds[mp.GroupKind], gvr, nil
}

// GetResource returns the object of a resource (a subresource reads the
// object itself) in a namespace ("" for cluster-scoped objects), as
// stored: whatever version is asked, the object is the one stored (Arbiter
// does not convert between versions). A missing object, or a resource the
// mapping does not know, is a NotFound error, as a cluster answers.
func (v *View) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	nb, i, err := v.lookup(apiVersion, resource, namespace, name)
	if err != nil {
		return nil, err
	}
	return &nb.items[i], nil
}

// GetResourceValue is GetResource returning the object's CEL value
// (kyvernocel.ResourceValueContext): one value per stored object, made on
// its first read and shared by every later read, concurrent ones
// included, as objects never change.
func (v *View) GetResourceValue(_ context.Context, apiVersion, resource, namespace, name string) (ref.Val, error) {
	nb, i, err := v.lookup(apiVersion, resource, namespace, name)
	if err != nil {
		return nil, err
	}
	return nb.value(i), nil
}

// lookup finds the object GetResource returns: nb.items[i].
func (v *View) lookup(apiVersion, resource, namespace, name string) (nb *nsBucket, i int, err error) {
	mp, b, gvr, err := v.resolve(apiVersion, resource)
	if err != nil {
		return nil, 0, err
	}
	if mp != nil && b != nil {
		if nb := b.byNS[namespace]; nb != nil {
			if i, ok := nb.find(name); ok {
				return nb, i, nil
			}
		}
	}
	return nil, 0, apierrors.NewNotFound(gvr.GroupResource(), name)
}

// ListResources lists the objects of a resource in a namespace, or in all
// namespaces for "" (a cluster-scoped resource's objects have none), by
// namespace then name, keeping those whose labels hold every key and value
// of labels, as the label selector Kyverno builds (labels.SelectorFromSet)
// does. The list is shaped as a cluster's (apiVersion, kind <Kind>List,
// metadata). A resource the mapping does not know is an error, as a
// cluster answers 404.
func (v *View) ListResources(_ context.Context, apiVersion, resource, namespace string, labels map[string]string) (*unstructured.UnstructuredList, error) {
	mp, b, gvr, err := v.resolve(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	if mp == nil {
		return nil, fmt.Errorf("the server could not find the requested resource: no built-in kind, CustomResourceDefinition or context object maps to %s", gvr.String())
	}
	var items []unstructured.Unstructured
	if b != nil {
		switch {
		case namespace != "":
			if nb := b.byNS[namespace]; nb != nil {
				items = nb.items
				if len(labels) > 0 {
					items = nb.selectLabels(labels, nil)
				}
			}
		case len(labels) == 0:
			items = b.allItems()
		default:
			b.derive()
			for _, ns := range b.namespaces {
				items = b.byNS[ns].selectLabels(labels, items)
			}
		}
	}
	if items == nil {
		items = []unstructured.Unstructured{}
	}
	return &unstructured.UnstructuredList{Object: listMeta(gvr.GroupVersion().String(), mp.GroupKind.Kind+"List"), Items: items}, nil
}

func listMeta(apiVersion, kind string) map[string]any {
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"resourceVersion": ""}}
}

// selectLabels appends to out the items whose labels hold every key and value
// of want.
func (nb *nsBucket) selectLabels(want map[string]string, out []unstructured.Unstructured) []unstructured.Unstructured {
	for i, have := range nb.labels {
		if len(have) < len(want) {
			continue
		}
		ok := true
		for k, v := range want {
			if s, isStr := have[k].(string); !isStr || s != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, nb.items[i])
		}
	}
	return out
}

// ToGVR maps an API version and kind to its resource: built-in kinds,
// CustomResourceDefinitions among the context objects, and the kinds of
// the context objects. A version the kind is not served at is an error, as
// a REST mapper's (`no matches for kind "X" in version "g/v"`).
func (v *View) ToGVR(_ context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	mp, ok := v.Mapper().KindFor(schema.GroupKind{Group: gv.Group, Kind: kind})
	if !ok || !mp.hasVersion(gv.Version) {
		return nil, fmt.Errorf("no matches for kind %q in version %q", kind, gv.String())
	}
	gvr := gv.WithResource(mp.Resource)
	return &gvr, nil
}

// All returns the objects in key order (see Range).
func (v *View) All() iter.Seq2[Key, *manifest.Object] {
	return func(yield func(Key, *manifest.Object) bool) { v.Range(yield) }
}

// RangeKind calls fn for every object of one kind, by namespace then name,
// until fn returns false.
func (v *View) RangeKind(gk schema.GroupKind, fn func(Key, *manifest.Object) bool) {
	if v == nil {
		return
	}
	b := v.kinds[gk]
	if b == nil {
		return
	}
	b.derive()
	for _, ns := range b.namespaces {
		nb := b.byNS[ns]
		for i, name := range nb.names {
			if !fn(Key{Group: gk.Group, Kind: gk.Kind, Namespace: ns, Name: name}, nb.objs[i]) {
				return
			}
		}
	}
}
