package schema

import (
	"fmt"
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
)

// referenceCRDConverter is what kube-apiserver's MutatingAdmissionPolicy
// plugin uses for a custom resource: the OpenAPI v3 document the
// apiextensions-apiserver publishes for each served version
// (builder.BuildOpenAPIV3, as controller/openapiv3 calls it), given to
// managedfields.NewTypeConverter(components.schemas, false) (as
// patch.NewTypeConverterManager does).
func referenceCRDConverter(t testing.TB, crd map[string]any) managedfields.TypeConverter {
	t.Helper()
	var c apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(crd, &c); err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*spec.Schema{}
	for _, v := range c.Spec.Versions {
		if !v.Served {
			continue
		}
		doc, err := builder.BuildOpenAPIV3(&c, v.Name, builder.Options{V2: false})
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range doc.Components.Schemas {
			schemas[k] = s
		}
	}
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// upstreamApply is kube-apiserver's merge (k8s.io/apiserver v0.37.2).
func upstreamApply(tc managedfields.TypeConverter, obj, ac map[string]any) (map[string]any, error) {
	out, err := patch.ApplyStructuredMergeDiff(tc, &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: ac})
	if err != nil {
		return nil, err
	}
	return out.(*unstructured.Unstructured).Object, nil
}

// kyvernoApply is Kyverno v1.19.1's applyStructuredMergeDiff
// (pkg/cel/policies/mpol/compiler/smd.go), used with useServerSideApply:
// upstream without validatePatch. (Kyverno cannot be linked beside
// k8s.io/apiserver v0.37, so its few lines are copied here.)
func kyvernoApply(typeConverter managedfields.TypeConverter, obj, ac map[string]any) (map[string]any, error) {
	originalObject := &unstructured.Unstructured{Object: obj}
	patch := &unstructured.Unstructured{Object: ac}
	if patch.GroupVersionKind() != originalObject.GetObjectKind().GroupVersionKind() {
		return nil, fmt.Errorf("patch (%v) and original object (%v) are not of the same gvk", patch.GroupVersionKind().String(), originalObject.GetObjectKind().GroupVersionKind().String())
	} else if typeConverter == nil {
		return nil, fmt.Errorf("type converter must not be nil")
	}
	patchObjTyped, err := typeConverter.ObjectToTyped(patch)
	if err != nil {
		return nil, fmt.Errorf("failed to convert patch object to typed object: %w", err)
	}
	liveObjTyped, err := typeConverter.ObjectToTyped(originalObject, typed.AllowDuplicates)
	if err != nil {
		return nil, fmt.Errorf("failed to convert original object to typed object: %w", err)
	}
	newObjTyped, err := liveObjTyped.Merge(patchObjTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to merge patch: %w", err)
	}
	newObj, err := typeConverter.TypedToObject(newObjTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to convert typed object to object: %w", err)
	}
	return newObj.(*unstructured.Unstructured).Object, nil
}
