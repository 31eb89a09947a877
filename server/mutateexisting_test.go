package server_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// mutateExistingFixture: a mutate-existing MutatingPolicy set off by the
// creation of a ConfigMap, and a ValidatingPolicy that denies ConfigMaps
// labelled deny.
const mutateExistingFixture = `apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: label-secrets
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  targetMatchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [secrets]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"seen": "yes"}}}'
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: no-deny-label
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)"
      message: denied
`

// recordingSink records the triggers Decide hands over.
type recordingSink struct {
	mu  sync.Mutex
	got [][]string
	// objects and admitted are the triggers' request objects and
	// admitted objects.
	objects, admitted []map[string]any
}

func (r *recordingSink) Trigger(req *admission.Request, admitted map[string]any, policies []string, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, append([]string{req.Operation + " " + req.Name}, policies...))
	r.objects = append(r.objects, req.Object)
	r.admitted = append(r.admitted, admitted)
}

func (r *recordingSink) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got, r.objects, r.admitted = nil, nil, nil
	return out
}

// TestDecideHandsOverTheAdmittedObject: the sink receives, with the
// request, its object as the replica's mutations left it (what the API
// server persists): the mutated object when they changed it, the
// request's object when they did not.
func TestDecideHandsOverTheAdmittedObject(t *testing.T) {
	ts := startServer(t, server.Config{MutateExisting: true})
	ctx := context.Background()
	labelling := mutateExistingFixture + `---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: label-configmaps
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"admitted": "yes"}}}'
`
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, labelling))); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	ts.SetMutateExisting(sink)
	for _, tt := range []struct {
		name, object string
		wantLabels   map[string]any
	}{
		{"changed by the mutations", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"trigger","namespace":"apps"}}`, map[string]any{"admitted": "yes"}},
		{"left as it is", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"trigger","namespace":"apps","labels":{"admitted":"yes"}}}`, map[string]any{"admitted": "yes"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: []byte(tt.object), AdmissionWebhook: true, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY}); err != nil {
				t.Fatal(err)
			}
			sink.mu.Lock()
			objects, admitted := sink.objects, sink.admitted
			sink.mu.Unlock()
			if got := sink.take(); !reflect.DeepEqual(got, [][]string{{"CREATE trigger", "label-secrets"}}) {
				t.Fatalf("triggers %v", got)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tt.object), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(objects[0], want) {
				t.Errorf("the request's object %v, want %v (as received)", objects[0], want)
			}
			want["metadata"].(map[string]any)["labels"] = tt.wantLabels
			if !reflect.DeepEqual(admitted[0], want) {
				t.Errorf("admitted %v, want %v", admitted[0], want)
			}
		})
	}
}

// TestMutateExistingRefusedWithoutCluster: a replica without
// Config.MutateExisting (push, --load) refuses a mutate-existing policy,
// saying why.
func TestMutateExistingRefusedWithoutCluster(t *testing.T) {
	ts := startServer(t, server.Config{})
	_, err := ts.LoadObjects(context.Background(), readObjects(t, writeFixture(t, mutateExistingFixture)))
	if err == nil || !strings.Contains(err.Error(), "spec.targetMatchConstraints") || !strings.Contains(err.Error(), "--kube-source") || !strings.Contains(err.Error(), "no cluster") {
		t.Fatalf("load: %v", err)
	}
}

// TestDecideSetsOffMutateExisting: only a Decide from the webhook shim
// (admission_webhook), not a dry run, allowed, that runs the mutations,
// hands the request to the sink, with the policies it sets off.
func TestDecideSetsOffMutateExisting(t *testing.T) {
	ts := startServer(t, server.Config{MutateExisting: true})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mutateExistingFixture))); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	ts.SetMutateExisting(sink)
	cm := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"trigger","namespace":"apps"}}`)
	denied := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bad","namespace":"apps","labels":{"deny":"yes"}}}`)
	secret := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"apps"}}`)
	for _, tt := range []struct {
		name string
		req  *arbiterv1.DecideRequest
		want [][]string
	}{
		{"the mutating webhook", &arbiterv1.DecideRequest{ObjectJson: cm, AdmissionWebhook: true, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY},
			[][]string{{"CREATE trigger", "label-secrets"}}},
		{"every stage", &arbiterv1.DecideRequest{ObjectJson: cm, AdmissionWebhook: true}, [][]string{{"CREATE trigger", "label-secrets"}}},
		{"not from the webhook", &arbiterv1.DecideRequest{ObjectJson: cm, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY}, nil},
		{"the validating webhook", &arbiterv1.DecideRequest{ObjectJson: cm, AdmissionWebhook: true, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY}, nil},
		{"dry run", &arbiterv1.DecideRequest{ObjectJson: cm, AdmissionWebhook: true, DryRun: true}, nil},
		{"denied", &arbiterv1.DecideRequest{ObjectJson: denied, AdmissionWebhook: true}, nil},
		{"not matched", &arbiterv1.DecideRequest{ObjectJson: secret, AdmissionWebhook: true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ts.c.Decide(ctx, tt.req); err != nil {
				t.Fatal(err)
			}
			if got := sink.take(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("triggers %v, want %v", got, tt.want)
			}
		})
	}
	ts.SetMutateExisting(nil)
	if _, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: cm, AdmissionWebhook: true}); err != nil {
		t.Fatal(err)
	}
	if got := sink.take(); got != nil {
		t.Errorf("without a sink: %v", got)
	}
}
