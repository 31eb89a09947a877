package server_test

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// mutationFixture: a MutatingPolicy that labels Pods and a ValidatingPolicy
// that requires the label, so only the mutated object is compliant.
const mutationFixture = `apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: add-team
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"team": "platform"}}}'
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-team
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: a team label is required
`

// TestDecideMutates: over gRPC, Decide mutates then validates the mutated
// object, and returns the RFC 6902 patch that turns the request's object
// into it; STAGES_VALIDATE_ONLY validates the object as given (denied, no
// patch), STAGES_MUTATE_ONLY returns the patch without validating.
func TestDecideMutates(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mutationFixture))); err != nil {
		t.Fatal(err)
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)

	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetResults()) != 2 || resp.GetPatchType() != "JSONPatch" {
		t.Fatalf("all stages: allowed %v, %d results, patch type %q", resp.GetAllowed(), len(resp.GetResults()), resp.GetPatchType())
	}
	if r := resp.GetResults()[0]; r.GetPolicy() != "add-team" || r.GetResult() != "pass" || r.GetSource() != "KyvernoMutatingPolicy" {
		t.Fatalf("mutation result: %v", r)
	}
	p, err := jsonpatch.DecodePatch(resp.GetPatch())
	if err != nil {
		t.Fatalf("patch %s: %v", resp.GetPatch(), err)
	}
	mutated, err := p.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(mutated, &obj); err != nil {
		t.Fatal(err)
	}
	if labels, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any); labels["team"] != "platform" {
		t.Fatalf("patch %s gives %s", resp.GetPatch(), mutated)
	}

	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || len(resp.GetPatch()) != 0 || len(resp.GetResults()) != 1 || resp.GetStatus().GetMessage() != "Policy require-team failed: a team label is required" {
		t.Fatalf("validate only: %v", resp)
	}

	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetPatch()) == 0 || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicy() != "add-team" {
		t.Fatalf("mutate only: %v", resp)
	}
}
