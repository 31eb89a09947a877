package engine_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// configMaps serves ConfigMaps to resource.get (the other libraries are
// offline).
type configMaps struct {
	kyvernocel.Context
	objects []map[string]any
}

func (c configMaps) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	for _, o := range c.objects {
		u := &unstructured.Unstructured{Object: o}
		if apiVersion == "v1" && resource == "configmaps" && u.GetNamespace() == namespace && u.GetName() == name {
			return u, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
}

const mutateExistingPolicies = `
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata: {name: a-name-the-target}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'target': 'cm'}}}"
---
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata: {name: b-label-the-target}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  targetMatchConstraints:
    expression: "resource.get('v1', 'configmaps', object.metadata.namespace, object.metadata.labels.target)"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'triggered-by': request.object.metadata.name}}}"
`

// TestMutateExisting: PolicySet.MutateExisting mutates the trigger first
// (the targetMatchConstraints expression reads the mutated trigger), then
// each target the policies select, as `kyverno test` with targetResources.
func TestMutateExisting(t *testing.T) {
	docs, err := manifest.Parse("policies.yaml", []byte(mutateExistingPolicies))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifest.FromDocuments(docs)
	if _, err := engine.Compile(objs, engine.Options{}); err == nil || !strings.Contains(err.Error(), "evaluated offline only") {
		t.Errorf("a mutate-existing policy without Options.MutateExisting: %v", err)
	}
	ps, err := engine.Compile(objs, engine.Options{MutateExisting: true})
	if err != nil {
		t.Fatal(err)
	}
	trigger := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "ns"},
	}
	cm := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns"},
	}
	other := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "other", "namespace": "ns"},
	}
	req := &admission.Request{Object: trigger, Mode: admission.ModeCLI}
	req.Fill()
	res := ps.MutateExisting(context.Background(), req, []engine.Target{{Object: cm}, {Object: other}},
		&engine.EvalOptions{Context: configMaps{Context: kyvernocel.Offline, objects: []map[string]any{cm, other}}})
	if len(res.Errors) != 0 {
		t.Fatalf("errors: %v", res.Errors)
	}
	if len(res.Targets) != 2 {
		t.Fatalf("%d target results", len(res.Targets))
	}
	got := res.Targets[0]
	if len(got.Results) != 1 || got.Results[0].PolicyName != "b-label-the-target" || got.Results[0].Result != "pass" {
		t.Errorf("target cm: %+v", got.Results)
	}
	labels, _, _ := unstructured.NestedStringMap(got.Patched, "metadata", "labels")
	if labels["triggered-by"] != "web" || len(labels) != 1 {
		t.Errorf("target cm patched: %v", got.Patched)
	}
	if _, ok := cm["metadata"].(map[string]any)["labels"]; ok {
		t.Error("the target was modified")
	}
	if r := res.Targets[1]; len(r.Results) != 0 || r.Patched["metadata"].(map[string]any)["labels"] != nil {
		t.Errorf("target other: %+v", r)
	}
}
