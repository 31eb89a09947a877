package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

func vapObjectJSON(t *testing.T, o map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A ValidatingAdmissionPolicy, its binding and its param are stored (a
// param only as the param of a stored policy); the decision carries the
// denial's HTTP code and reason.
func TestValidatingAdmissionPolicyStored(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	policy := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "max-keys"},
		"spec": map[string]any{
			"paramKind": map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"secrets"}}}},
			"validations": []any{map[string]any{
				"expression": "size(object.data) <= int(params.data.max)", "messageExpression": "'at most ' + params.data.max + ' keys'", "reason": "Forbidden"}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "max-keys"},
		"spec": map[string]any{"policyName": "max-keys", "validationActions": []any{"Deny"},
			"paramRef": map[string]any{"name": "limits", "parameterNotFoundAction": "Deny"}},
	}
	param := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "limits", "namespace": "apps"}, "data": map[string]any{"max": "1"}}

	// A param alone is a context object: stored, and found by the policy
	// written after it.
	if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, param)}}}); err != nil {
		t.Fatalf("param without its policy: %v", err)
	}
	var changes []*arbiterv1.Change
	for _, o := range []map[string]any{policy, binding} {
		changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, o)})
	}
	ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "apps"}, "data": map[string]any{"a": "YQ==", "b": "Yg=="}}
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: vapObjectJSON(t, secret), MinRevision: ack.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	want := "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys' denied request: at most 1 keys"
	if resp.GetAllowed() || resp.GetStatus().GetCode() != 403 || resp.GetStatus().GetReason() != "Forbidden" || resp.GetStatus().GetMessage() != want {
		t.Fatalf("decision: allowed=%v status=%v", resp.GetAllowed(), resp.GetStatus())
	}
	if len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicyKind() != "ValidatingAdmissionPolicy" || resp.GetResults()[0].GetProperties()["binding"] != "max-keys" {
		t.Fatalf("results: %v", resp.GetResults())
	}
	// A Secret is refused unless the server stores Secrets.
	_, err = ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, secret)}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Secret apps/s") || !strings.Contains(err.Error(), "--store-secrets") {
		t.Fatalf("secret write: %v", err)
	}
	// An invalid binding is refused with its field.
	bad := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "both"},
		"spec":     map[string]any{"policyName": "max-keys", "validationActions": []any{"Deny", "Warn"}},
	}
	_, err = ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, bad)}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.validationActions") {
		t.Fatalf("Deny+Warn binding: %v", err)
	}
}

// ValidatingAdmissionPolicies are in the inventory (Status counts them,
// ListPolicies and GetPolicy describe them with their bindings' actions)
// and Explain traces their evaluation per binding and param.
func TestValidatingAdmissionPolicyInventoryAndExplain(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	policy := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "require-owner", "labels": map[string]any{"team": "platform"}},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"configmaps"}}}},
			"matchConditions": []any{map[string]any{"name": "not-system", "expression": "!request.namespace.startsWith('kube-')"}},
			"variables":       []any{map[string]any{"name": "labels", "expression": "object.metadata.?labels.orValue({})"}},
			"validations":     []any{map[string]any{"expression": "'owner' in variables.labels", "message": "configmaps need an owner label"}},
		},
	}
	warn := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "owner-warn"},
		"spec":     map[string]any{"policyName": "require-owner", "validationActions": []any{"Warn", "Audit"}},
	}
	deny := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "owner-deny-prod"},
		"spec": map[string]any{"policyName": "require-owner", "validationActions": []any{"Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"env": "prod"}}}},
	}
	var changes []*arbiterv1.Change
	for _, o := range []map[string]any{policy, warn, deny} {
		changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, o)})
	}
	ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.Query.Status(ctx, &arbiterv1.StatusRequest{})
	if err != nil || st.GetPolicies() != 1 {
		t.Fatalf("status: %v %v", st, err)
	}
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Action: "Deny", LabelSelector: "team=platform"})
	if err != nil || len(list.GetPolicies()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	p := list.GetPolicies()[0]
	if p.GetKind() != "ValidatingAdmissionPolicy" || p.GetName() != "require-owner" || strings.Join(p.GetActions(), ",") != "Deny,Warn,Audit" ||
		strings.Join(p.GetResources(), ",") != "v1/configmaps" || strings.Join(p.GetBindings(), ",") != "owner-deny-prod,owner-warn" || len(p.GetManifestJson()) == 0 {
		t.Fatalf("policy info: %v", p)
	}
	for _, filter := range []*arbiterv1.ListPoliciesRequest{{Kind: "ValidatingPolicy"}, {Namespace: "apps"}, {LabelSelector: "team=other"}} {
		if l, err := ts.c.Query.ListPolicies(ctx, filter); err != nil || len(l.GetPolicies()) != 0 {
			t.Fatalf("list %v: %v %v", filter, l, err)
		}
	}
	got, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: "ValidatingAdmissionPolicy", Name: "require-owner"})
	if err != nil || got.GetPolicy().GetLabels()["team"] != "platform" {
		t.Fatalf("get: %v %v", got, err)
	}

	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "apps"}}
	ex, err := ts.c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: vapObjectJSON(t, cm), MinRevision: ack.GetRevision()}})
	if err != nil {
		t.Fatal(err)
	}
	if !ex.GetDecision().GetAllowed() || len(ex.GetDecision().GetWarnings()) != 1 {
		t.Fatalf("decision: %v", ex.GetDecision())
	}
	var lines []string
	for _, s := range ex.GetSteps() {
		line := s.GetPolicy() + "|" + s.GetVariant() + "|" + s.GetPhase() + "|" + s.GetName() + "|"
		if s.GetNote() != "" {
			line += s.GetNote()
		} else {
			line += s.GetValue() + s.GetError()
		}
		lines = append(lines, line)
	}
	want := []string{
		"require-owner||matchConstraints||matched the policy's matchConstraints as v1 ConfigMap",
		"require-owner|binding owner-deny-prod|binding.matchResources||the binding's matchResources do not match: not evaluated",
		"require-owner|binding owner-warn|matchCondition|not-system|true",
		"require-owner|binding owner-warn|variable|labels|{}",
		"require-owner|binding owner-warn|validation|0|false",
		"require-owner|binding owner-warn|result||fail: configmaps need an owner label (validationActions Warn, Audit)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// The request's requestKind, requestResource and requestSubResource (as the
// webhook shim passes them from an AdmissionReview) reach the policies.
func TestRequestKindReachesPolicies(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	policy := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "show-request-kind"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"deployments"}}}},
			"validations": []any{map[string]any{"expression": "false",
				"messageExpression": "'<' + request.requestKind.version + '|' + request.requestResource.resource + '|' + request.?requestSubResource.orValue('') + '>'"}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "show-request-kind"},
		"spec":     map[string]any{"policyName": "show-request-kind", "validationActions": []any{"Deny"}},
	}
	var changes []*arbiterv1.Change
	for _, o := range []map[string]any{policy, binding} {
		changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, o)})
	}
	ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	deploy := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d", "namespace": "apps"}}
	for _, tc := range []struct {
		name string
		req  *arbiterv1.DecideRequest
		want string
	}{
		{"defaults", &arbiterv1.DecideRequest{}, "<v1|deployments|>"},
		{"as sent", &arbiterv1.DecideRequest{
			RequestKind:     &arbiterv1.GroupVersionKind{Group: "apps", Version: "v1beta2", Kind: "Deployment"},
			RequestResource: &arbiterv1.GroupVersionResource{Group: "apps", Version: "v1beta2", Resource: "deployments"},
		}, "<v1beta2|deployments|>"},
		// A rule on deployments does not cover the scale sub-resource the
		// client sent.
		{"sub-resource as sent", &arbiterv1.DecideRequest{RequestSubResource: "scale"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.ObjectJson, tc.req.MinRevision = vapObjectJSON(t, deploy), ack.GetRevision()
			resp, err := ts.c.Decide(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if !resp.GetAllowed() {
					t.Fatalf("denied: %v", resp.GetStatus())
				}
				return
			}
			if !strings.HasSuffix(resp.GetStatus().GetMessage(), "denied request: "+tc.want) {
				t.Fatalf("message %q, want it to end with %q", resp.GetStatus().GetMessage(), tc.want)
			}
		})
	}
}

// GetPolicy without a kind finds the policy of any kind with the name.
func TestGetPolicyAnyKind(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	vp := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": map[string]any{"name": "kyverno-one"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"}}}},
			"validations": []any{map[string]any{"expression": "true"}},
		},
	}
	nvp := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy", "metadata": map[string]any{"name": "team-one", "namespace": "team"},
		"spec": vp["spec"],
	}
	vap := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": map[string]any{"name": "kube-one"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"}}}},
			"validations": []any{map[string]any{"expression": "true"}},
		},
	}
	var changes []*arbiterv1.Change
	for _, o := range []map[string]any{vp, nvp, vap} {
		changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, o)})
	}
	if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, name, wantKind string
	}{
		{"", "kyverno-one", "ValidatingPolicy"},
		{"", "kube-one", "ValidatingAdmissionPolicy"},
		{"team", "team-one", "NamespacedValidatingPolicy"},
		{"", "team-one", ""},
		{"", "missing", ""},
	} {
		resp, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Namespace: tc.ns, Name: tc.name})
		if tc.wantKind == "" {
			if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "policy "+tc.name+" not found") {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err != nil || resp.GetPolicy().GetKind() != tc.wantKind {
			t.Errorf("%s/%s: %v %v", tc.ns, tc.name, resp.GetPolicy().GetKind(), err)
		}
	}
}
