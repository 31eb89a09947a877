package schema

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// ApplyConfiguration merges an apply configuration into obj as
// kube-apiserver's MutatingAdmissionPolicy does: a port of k8s.io/apiserver
// v0.37.2 pkg/admission/plugin/policy/mutating/patch/smd.go
// ApplyStructuredMergeDiff, with the same steps and error texts:
//
//   - the apply configuration and obj must have the same apiVersion and kind
//     ("patch (…) and original object (…) are not of the same gvk"; the
//     patcher sets the apply configuration's to obj's before merging);
//   - tc must not be nil ("type converter must not be nil");
//   - the apply configuration is converted ("failed to convert patch object
//     to typed object: …") and, unless allowAtomic, must not set any atomic
//     list, map or struct ("invalid ApplyConfiguration: may not mutate atomic
//     arrays, maps or structs: <paths>");
//   - obj is converted, duplicates allowed ("failed to convert original
//     object to typed object: …"), merged ("failed to merge patch: …") and
//     converted back ("failed to convert typed object to object: …").
//
// allowAtomic skips the atomic guard, as Kyverno's MutatingPolicy does when
// useServerSideApply is set (its local copy of the function, without
// validatePatch).
//
// Two deliberate differences, both about messages that upstream builds in Go's
// map order: with this package's converters, a schema error lists what
// structured-merge-diff finds when it visits map keys in sorted order
// (upstream's list varies from run to run when there are several errors; with
// one, the text is the same), and the atomic paths of one map are listed in
// sorted order. Replicas thus give the same message for the same request.
//
// With this package's converters (Builtin, CRDConverter), a fast path merges
// without building structured-merge-diff's typed values (see fast.go); it
// answers only when it gives the same object, and leaves every other case,
// errors included, to structured-merge-diff.
//
// Neither obj nor applyConfig is modified. The result is a new top-level map,
// but it shares what the apply configuration does not change with obj (whole
// maps and lists), and may share parts of applyConfig: treat all three as
// immutable, or copy before changing one in place.
func ApplyConfiguration(tc managedfields.TypeConverter, obj, applyConfig map[string]any, allowAtomic bool) (map[string]any, error) {
	patch := &unstructured.Unstructured{Object: applyConfig}
	original := &unstructured.Unstructured{Object: obj}
	if patch.GroupVersionKind() != original.GroupVersionKind() {
		return nil, fmt.Errorf("patch (%v) and original object (%v) are not of the same gvk", patch.GroupVersionKind().String(), original.GroupVersionKind().String())
	} else if tc == nil {
		return nil, fmt.Errorf("type converter must not be nil")
	}
	if ft, ok := tc.(fastTyper); ok {
		if out, ok := fastApply(ft.fastType(original.GroupVersionKind()), obj, applyConfig, allowAtomic); ok {
			return out, nil
		}
	}
	return applySMD(tc, original, patch, allowAtomic)
}

// applySMD is ApplyStructuredMergeDiff after its kind checks.
func applySMD(tc managedfields.TypeConverter, original, patch *unstructured.Unstructured, allowAtomic bool) (map[string]any, error) {
	patchObjTyped, err := tc.ObjectToTyped(patch)
	if err != nil {
		return nil, fmt.Errorf("failed to convert patch object to typed object: %w", deterministic(tc, patch, err, false))
	}

	if !allowAtomic {
		if err := validatePatch(patchObjTyped); err != nil {
			return nil, fmt.Errorf("invalid ApplyConfiguration: %w", err)
		}
	}

	liveObjTyped, err := tc.ObjectToTyped(original, typed.AllowDuplicates)
	if err != nil {
		return nil, fmt.Errorf("failed to convert original object to typed object: %w", deterministic(tc, original, err, true))
	}

	newObjTyped, err := liveObjTyped.Merge(patchObjTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to merge patch: %w", err)
	}

	newObj, err := tc.TypedToObject(newObjTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to convert typed object to object: %w", err)
	}
	u, ok := newObj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("failed to convert typed object to object: got %T", newObj)
	}
	return u.Object, nil
}

// validatePatch searches an apply configuration for any arrays, maps or structs elements that are atomic and returns
// an error if any are found.
func validatePatch(v *typed.TypedValue) error {
	atomics := findAtomics(nil, v.Schema(), v.TypeRef(), v.AsValue())
	if len(atomics) > 0 {
		return fmt.Errorf("may not mutate atomic arrays, maps or structs: %v", strings.Join(atomics, ", "))
	}
	return nil
}

// findAtomics returns field paths for any atomic arrays, maps or structs found when traversing the given value.
// As upstream, it descends only into the fields of structs (not the values of
// granular maps) and the items of lists. Unlike upstream, it visits the keys
// of a map in sorted order, so that the error is deterministic (upstream
// follows Go's map order, which varies when one map holds several atomics).
func findAtomics(path []fieldpath.PathElement, s *smdschema.Schema, tr smdschema.TypeRef, v value.Value) (atomics []string) {
	if a, ok := s.Resolve(tr); ok { // Validation pass happens before this and checks that all schemas can be resolved
		if v.IsMap() && a.Map != nil {
			if a.Map.ElementRelationship == smdschema.Atomic {
				atomics = append(atomics, pathString(path))
			}
			m := v.AsMap()
			for _, key := range sortedKeys(m) {
				if sf, ok := a.FindField(key); ok {
					val, _ := m.Get(key)
					pe := fieldpath.PathElement{FieldName: &key}
					atomics = append(atomics, findAtomics(append(path, pe), s, sf.Type, val)...)
				}
			}
		}
		if v.IsList() && a.List != nil {
			if a.List.ElementRelationship == smdschema.Atomic {
				atomics = append(atomics, pathString(path))
			}
			list := v.AsList()
			for i := 0; i < list.Length(); i++ {
				pe := fieldpath.PathElement{Index: &i}
				atomics = append(atomics, findAtomics(append(path, pe), s, a.List.ElementType, list.At(i))...)
			}
		}
	}
	return atomics
}

func pathString(path []fieldpath.PathElement) string {
	sb := strings.Builder{}
	for _, p := range path {
		sb.WriteString(p.String())
	}
	return sb.String()
}

func sortedKeys(m value.Map) []string {
	keys := make([]string, 0, m.Length())
	m.Iterate(func(key string, _ value.Value) bool {
		keys = append(keys, key)
		return true
	})
	sort.Strings(keys)
	return keys
}
