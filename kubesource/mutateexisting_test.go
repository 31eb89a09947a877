package kubesource

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

type staticSnapshot struct{ ps *engine.PolicySet }

func (s staticSnapshot) PolicySet() *engine.PolicySet { return s.ps }
func (staticSnapshot) Context() kyvernocel.Context    { return kyvernocel.Offline }

const ownWritePolicies = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: skips}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'a': 'b'}}]"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: does-not-skip}
spec:
  evaluation:
    mutateExisting: {enabled: true}
    skipBackgroundRequests: false
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'a': 'b'}}]"
`

// TestTriggerSkipsOwnWrites: an UPDATE made by the Mutator (its field
// manager) sets off only the policies with skipBackgroundRequests false;
// any other request sets off every policy it qualifies for.
func TestTriggerSkipsOwnWrites(t *testing.T) {
	docs, err := manifest.Parse("policies.yaml", []byte(ownWritePolicies))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{MutateExisting: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &Mutator{cfg: MutateExistingConfig{Component: "arbiter"}, log: slog.New(slog.DiscardHandler),
		current: func() MutatorSnapshot { return staticSnapshot{ps} }, queue: make(chan trigger, 10)}
	all := []string{"does-not-skip", "skips"}
	for _, tt := range []struct {
		name string
		req  admission.Request
		want []string
	}{
		{"own update", admission.Request{Operation: admission.OpUpdate, Options: map[string]any{"fieldManager": "arbiter"}}, []string{"does-not-skip"}},
		{"another manager's update", admission.Request{Operation: admission.OpUpdate, Options: map[string]any{"fieldManager": "kubectl"}}, all},
		{"a create", admission.Request{Operation: admission.OpCreate, Options: map[string]any{"fieldManager": "arbiter"}}, all},
		{"no options", admission.Request{Operation: admission.OpUpdate}, all},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m.Trigger(&tt.req, nil, all, 1)
			var got []string
			select {
			case tr := <-m.queue:
				got = tr.policies
			default:
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
	m.Trigger(&admission.Request{Operation: admission.OpUpdate, Options: map[string]any{"fieldManager": "arbiter"}}, nil, []string{"skips"}, 1)
	if len(m.queue) != 0 || m.Stats().Queued != 4 {
		t.Errorf("an own update of a skipping policy was queued: %+v", m.Stats())
	}
	// A full queue drops the trigger, counted.
	m.queue = make(chan trigger, 1)
	m.Trigger(&admission.Request{Operation: admission.OpCreate}, nil, all, 1)
	m.Trigger(&admission.Request{Operation: admission.OpCreate}, nil, all, 1)
	if st := m.Stats(); st.Queued != 5 || st.Dropped != 1 || len(m.queue) != 1 {
		t.Errorf("a full queue: %+v, %d queued", st, len(m.queue))
	}
}
