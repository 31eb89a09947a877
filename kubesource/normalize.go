package kubesource

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/store"
)

// Kinds the source always watches, with the versions it accepts in order
// of preference (the engine reads policies.kyverno.io v1alpha1, v1beta1
// and v1, one schema).
var fixedKinds = []kindSpec{
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindNamespacedValidatingPolicy}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindMutatingPolicy}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindNamespacedMutatingPolicy}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindImageValidatingPolicy}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindNamespacedImageValidatingPolicy}, []string{"v1", "v1beta1"}},
	{schema.GroupKind{Group: kyvernoapi.Group, Kind: kyvernoapi.KindPolicyException}, []string{"v1", "v1beta1", "v1alpha1"}},
	{schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}, []string{"v1"}},
	{schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}, []string{"v1"}},
	{schema.GroupKind{Group: "", Kind: "Namespace"}, []string{"v1"}},
	// The data of globalContext.Get (context.go, apicall.go).
	{schema.GroupKind{Group: "kyverno.io", Kind: "GlobalContextEntry"}, []string{"v2", "v2beta1", "v2alpha1"}},
}

type kindSpec struct {
	gk       schema.GroupKind
	versions []string
}

func isFixed(gk schema.GroupKind) bool {
	for _, k := range fixedKinds {
		if k.gk == gk {
			return true
		}
	}
	return false
}

// keyOf is the store key of a cluster object (as server.KeyOf).
func keyOf(gk schema.GroupKind, namespace, name string) store.Key {
	return store.Key{Group: gk.Group, Kind: gk.Kind, Namespace: namespace, Name: name}
}

// stripVolatile drops what changes without the object changing (it runs
// as the informers' transform, so the caches do not hold it either).
func stripVolatile(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone
	}
	u.SetManagedFields(nil)
	return u, nil
}

// lastApplied is kubectl's copy of the whole manifest: it changes only
// with the object, and would double its size in the store.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// normalize returns the content Arbiter stores for a cluster object: a
// copy without the fields that change when nothing that matters does —
// resourceVersion, generation, managedFields, selfLink, kubectl's
// last-applied annotation — and without the status the engine does not
// read (policies keep status.generated; Namespaces and params keep their
// status, which namespaceObject and params expose). Two versions of an
// object that differ only there store the same bytes, so they make no
// revision (the store reports the write Unchanged).
func normalize(u *unstructured.Unstructured) map[string]any {
	obj := runtime.DeepCopyJSON(u.Object)
	if md, ok := obj["metadata"].(map[string]any); ok {
		for _, f := range []string{"resourceVersion", "generation", "managedFields", "selfLink"} {
			delete(md, f)
		}
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, lastApplied)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	gk := u.GroupVersionKind().GroupKind()
	switch {
	case isStatusKind(gk.Group, gk.Kind):
		st, _ := obj["status"].(map[string]any)
		delete(obj, "status")
		if g, ok := st["generated"].(bool); ok && g {
			obj["status"] = map[string]any{"generated": true}
		}
	case isFixed(gk) && gk.Kind != "Namespace":
		delete(obj, "status")
	}
	return obj
}
