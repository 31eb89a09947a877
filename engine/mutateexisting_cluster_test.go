package engine_test

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

const clusterMutateExisting = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: label-secrets}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - {name: wanted, expression: "'trigger'"}
  matchConditions:
  - {name: named, expression: "object.metadata.name == variables.wanted"}
  targetMatchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [secrets]}
  targetMatchConditions:
  - {name: not-skip, expression: "object.metadata.name != 'skip'"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'by': request.object.metadata.name}}}"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: no-admission}
spec:
  evaluation:
    admission: {enabled: false}
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'x': 'y'}}]"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedMutatingPolicy
metadata: {name: team-only, namespace: team}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'team': 'yes'}}]"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: admission-only}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'a': 'b'}}]"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: by-expression}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, DELETE], resources: [secrets]}
  targetMatchConstraints:
    expression: "resource.get('v1', 'configmaps', object.metadata.namespace, object.metadata.annotations.target)"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{annotations: {'seen': 'yes'}}}"
`

func clusterSet(t *testing.T) *engine.PolicySet {
	t.Helper()
	docs, err := manifest.Parse("policies.yaml", []byte(clusterMutateExisting))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{MutateExisting: true})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func object(apiVersion, kind, ns, name string, labels, annotations map[string]any) map[string]any {
	md := map[string]any{"name": name, "namespace": ns}
	if labels != nil {
		md["labels"] = labels
	}
	if annotations != nil {
		md["annotations"] = annotations
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}
}

// TestMutateExistingTriggers: which mutate-existing policies an admission
// request sets off in a cluster (Kyverno's MatchesMutateExisting).
func TestMutateExistingTriggers(t *testing.T) {
	ps := clusterSet(t)
	if !ps.HasMutateExisting() {
		t.Fatal("HasMutateExisting false")
	}
	for _, tt := range []struct {
		name string
		req  admission.Request
		want []string
	}{
		{"create in team", admission.Request{Operation: admission.OpCreate, Object: object("v1", "ConfigMap", "team", "trigger", nil, nil)}, []string{"label-secrets", "team/team-only"}},
		{"create elsewhere", admission.Request{Operation: admission.OpCreate, Object: object("v1", "ConfigMap", "other", "trigger", nil, nil)}, []string{"label-secrets"}},
		{"matchConditions false", admission.Request{Operation: admission.OpCreate, Object: object("v1", "ConfigMap", "other", "not-it", nil, nil)}, nil},
		{"operation not matched", admission.Request{Operation: admission.OpUpdate, Object: object("v1", "ConfigMap", "other", "trigger", nil, nil), OldObject: object("v1", "ConfigMap", "other", "trigger", nil, nil)}, nil},
		{"dry run", admission.Request{Operation: admission.OpCreate, DryRun: true, Object: object("v1", "ConfigMap", "team", "trigger", nil, nil)}, nil},
		{"background mode", admission.Request{Operation: admission.OpCreate, Mode: admission.ModeBackground, Object: object("v1", "ConfigMap", "team", "trigger", nil, nil)}, nil},
		{"delete of a secret", admission.Request{Operation: admission.OpDelete, OldObject: object("v1", "Secret", "other", "s", nil, nil)}, []string{"by-expression"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			req.Fill()
			var got []string
			for _, p := range ps.MutateExistingTriggers(context.Background(), &req, nil) {
				got = append(got, p.Key())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("triggers %v, want %v", got, tt.want)
			}
		})
	}
	if ps.MutateExistingPolicy("admission-only") != nil || ps.MutateExistingPolicy("label-secrets") == nil || ps.MutateExistingPolicy("team/team-only") == nil {
		t.Error("MutateExistingPolicy looks policies up by key, mutate-existing ones only")
	}
}

// TestMutateTargetBy: one policy on one target selected in the cluster:
// targetMatchConditions instead of matchConditions, `request` the
// trigger's; the target is not modified.
func TestMutateTargetBy(t *testing.T) {
	ps := clusterSet(t)
	p := ps.MutateExistingPolicy("label-secrets")
	if c := p.TargetConstraints(); c == nil || len(c.ResourceRules) != 1 || c.ResourceRules[0].Resources[0] != "secrets" || p.HasTargetExpression() {
		t.Fatalf("target constraints %+v", c)
	}
	trigger := &admission.Request{Operation: admission.OpCreate, Object: object("v1", "ConfigMap", "ns", "trigger", nil, nil)}
	trigger.Fill()
	for _, tt := range []struct {
		name   string
		target map[string]any
		result string
		want   map[string]any
	}{
		{"labelled", object("v1", "Secret", "ns", "s", nil, nil), outcome.Pass, object("v1", "Secret", "ns", "s", map[string]any{"by": "trigger"}, nil)},
		{"compliant", object("v1", "Secret", "ns", "s", map[string]any{"by": "trigger"}, nil), outcome.Pass, object("v1", "Secret", "ns", "s", map[string]any{"by": "trigger"}, nil)},
		{"targetMatchConditions false", object("v1", "Secret", "ns", "skip", nil, nil), outcome.Skip, object("v1", "Secret", "ns", "skip", nil, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := runtime.DeepCopyJSON(tt.target)
			res := ps.MutateTargetBy(context.Background(), p, trigger, engine.Target{Object: tt.target}, nil)
			if len(res.Results) != 1 || res.Results[0].Result != tt.result {
				t.Fatalf("results %+v", res.Results)
			}
			if !reflect.DeepEqual(res.Patched, tt.want) {
				t.Errorf("patched %v, want %v", res.Patched, tt.want)
			}
			if !reflect.DeepEqual(tt.target, before) {
				t.Error("the target was modified")
			}
		})
	}
	// A namespaced policy leaves other namespaces' targets alone.
	team := ps.MutateExistingPolicy("team/team-only")
	if res := ps.MutateTargetBy(context.Background(), team, trigger, engine.Target{Object: object("v1", "Secret", "ns", "s", nil, nil)}, nil); len(res.Results) != 0 {
		t.Errorf("a target out of the policy's namespace: %+v", res.Results)
	}
}

// TestMutateExistingTargets: the targetMatchConstraints expression on the
// trigger (its old object for a DELETE) returns the targets.
func TestMutateExistingTargets(t *testing.T) {
	ps := clusterSet(t)
	p := ps.MutateExistingPolicy("by-expression")
	if !p.HasTargetExpression() || p.TargetConstraints() != nil {
		t.Fatal("by-expression selects with its expression")
	}
	cm := object("v1", "ConfigMap", "ns", "settings", nil, nil)
	opts := &engine.EvalOptions{Context: configMaps{Context: kyvernocel.Offline, objects: []map[string]any{cm}}}
	secret := object("v1", "Secret", "ns", "s", nil, map[string]any{"target": "settings"})
	for _, req := range []*admission.Request{
		{Operation: admission.OpCreate, Object: secret},
		{Operation: admission.OpDelete, OldObject: secret},
	} {
		req.Fill()
		got, err := ps.MutateExistingTargets(context.Background(), p, req, opts)
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], cm) {
			t.Errorf("%s: targets %v, %v", req.Operation, got, err)
		}
	}
	missing := object("v1", "Secret", "ns", "s", nil, map[string]any{"target": "absent"})
	req := &admission.Request{Operation: admission.OpCreate, Object: missing}
	req.Fill()
	if got, err := ps.MutateExistingTargets(context.Background(), p, req, opts); err == nil {
		t.Errorf("a target that does not exist: %v, no error", got)
	}
}

// BenchmarkMutateExistingTriggers: what Decide adds to an admission
// request from the webhook when the set has mutate-existing policies
// (one qualifies, with matchConditions and a variable; one namespaced
// policy of another namespace).
func BenchmarkMutateExistingTriggers(b *testing.B) {
	docs, err := manifest.Parse("policies.yaml", []byte(clusterMutateExisting))
	if err != nil {
		b.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{MutateExisting: true})
	if err != nil {
		b.Fatal(err)
	}
	req := &admission.Request{Operation: admission.OpCreate, Object: object("v1", "ConfigMap", "other", "trigger", nil, nil)}
	req.Fill()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if len(ps.MutateExistingTriggers(ctx, req, nil)) != 1 {
			b.Fatal("want one policy")
		}
	}
}
