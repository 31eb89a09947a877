package server

import (
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// What the Kubernetes source (package kubesource) reads of a snapshot
// besides Object and Range.

// PolicySet returns the revision's compiled policies: the source watches
// the kinds their resource.Get and resource.List calls read, and runs the
// DeletingPolicies.
func (s *Snapshot) PolicySet() *engine.PolicySet { return s.Set }

// RangeKind calls fn for every stored object of one kind (group, kind), in
// key order, until fn returns false: the policy objects of that kind, or
// the context objects, without visiting the others. The objects are
// shared: they must not be modified.
func (s *Snapshot) RangeKind(group, kind string, fn func(store.Key, *manifest.Object) bool) {
	if s.objects != nil {
		start := store.Key{Group: group, Kind: kind}
		i := sort.Search(len(s.objects.keys), func(i int) bool { return !keyLess(s.objects.keys[i], start) })
		for ; i < len(s.objects.keys); i++ {
			k := s.objects.keys[i]
			if k.Group != group || k.Kind != kind {
				break
			}
			if !fn(k, s.objects.objs[i]) {
				return
			}
		}
	}
	if group == namespaceGK.Group && kind == namespaceGK.Kind {
		return // the policy objects above
	}
	s.view.RangeKind(schema.GroupKind{Group: group, Kind: kind}, func(k clusterdata.Key, o *manifest.Object) bool {
		return fn(storeKey(k), o)
	})
}
