package server_test

import (
	"context"
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
}

func (r *recordingSink) Trigger(req *admission.Request, _ map[string]any, policies []string, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, append([]string{req.Operation + " " + req.Name}, policies...))
}

func (r *recordingSink) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
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
