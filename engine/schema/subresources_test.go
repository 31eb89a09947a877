package schema

import (
	"reflect"
	"strings"
	"testing"

	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// TestSubresourceBinding: a v1 Binding (the body of pods/binding), which
// client-go's schema does not describe, merges apply configurations with
// the API server's schema: metadata as ObjectMeta, target an atomic
// ObjectReference.
func TestSubresourceBinding(t *testing.T) {
	gvk := k8sschema.GroupVersionKind{Version: "v1", Kind: "Binding"}
	if IsBuiltin(gvk) {
		t.Fatal("v1 Binding is in client-go's schema now: drop it from subresourceKinds")
	}
	tc := (*Schemas)(nil).For(gvk)
	if tc == nil {
		t.Fatal("no converter for v1 Binding")
	}
	obj := map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"name": "p", "namespace": "default", "annotations": map[string]any{"a": "1"}},
		"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": "n"},
	}
	got, err := ApplyConfiguration(tc, obj, map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"annotations": map[string]any{"b": "2"}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "1", "b": "2"}
	if ann := got["metadata"].(map[string]any)["annotations"]; !reflect.DeepEqual(ann, want) {
		t.Errorf("annotations %v, want %v", ann, want)
	}
	_, err = ApplyConfiguration(tc, obj, map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"target": map[string]any{"name": "m"},
	}, false)
	if err == nil || !strings.Contains(err.Error(), "may not mutate atomic arrays, maps or structs: .target") {
		t.Errorf("setting the atomic target: %v", err)
	}
	_, err = ApplyConfiguration(tc, obj, map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"spec": map[string]any{"x": "y"},
	}, false)
	if err == nil || !strings.Contains(err.Error(), ".spec: field not declared in schema") {
		t.Errorf("an undeclared field: %v", err)
	}
	if SubresourceBody(k8sschema.GroupVersionKind{Version: "v1", Kind: "Pod"}) != nil {
		t.Error("SubresourceBody of a Pod")
	}
}
