package server_test

import (
	"context"
	"strings"
	"testing"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

const (
	deletingPolicy = `{"apiVersion":"policies.kyverno.io/v1","kind":"DeletingPolicy","metadata":{"name":"old-configmaps","labels":{"team":"a"}},
"spec":{"schedule":"*/5 * * * *","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]},
 "conditions":[{"name":"labelled","expression":"has(object.metadata.labels) && 'cleanup' in object.metadata.labels"}]}}`
	deletingException = `{"apiVersion":"policies.kyverno.io/v1","kind":"PolicyException","metadata":{"name":"spare","namespace":"default"},
"spec":{"policyRefs":[{"kind":"DeletingPolicy","name":"old-configmaps"}],"matchConditions":[{"name":"n","expression":"object.metadata.name == 'keep'"}]}}`
	badSchedule = `{"apiVersion":"policies.kyverno.io/v1","kind":"DeletingPolicy","metadata":{"name":"bad"},
"spec":{"schedule":"sometimes","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}]}}}`
)

// A DeletingPolicy is stored and listed (with its exceptions), never
// evaluated at admission; one that does not validate is refused with
// Kyverno's message.
func TestDeletingPolicyStoredAndListed(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	up := func(j string) *arbiterv1.Change {
		return &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: []byte(j)}
	}
	if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{up(deletingPolicy), up(deletingException)}}); err != nil {
		t.Fatal(err)
	}
	_, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{up(badSchedule)}})
	if err == nil || !strings.Contains(err.Error(), "schedule spec in the deletingPolicy is not in proper cron format") {
		t.Fatalf("a bad schedule: %v", err)
	}
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Kind: "DeletingPolicy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetPolicies()) != 1 {
		t.Fatalf("ListPolicies: %v", list.GetPolicies())
	}
	p := list.GetPolicies()[0]
	if p.GetName() != "old-configmaps" || p.GetAdmissionEnabled() || p.GetBackgroundEnabled() || strings.Join(p.GetResources(), ",") != "v1/configmaps" ||
		strings.Join(p.GetExceptions(), ",") != "default/spare" || !strings.Contains(string(p.GetManifestJson()), `"schedule"`) {
		t.Fatalf("ListPolicies: %v", p)
	}
	sel, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{LabelSelector: "team=b"})
	if err != nil || len(sel.GetPolicies()) != 0 {
		t.Fatalf("ListPolicies team=b: %v %v", sel.GetPolicies(), err)
	}
	got, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: "DeletingPolicy", Name: "old-configmaps"})
	if err != nil || len(got.GetExceptions()) != 1 || got.GetExceptions()[0].GetName() != "spare" {
		t.Fatalf("GetPolicy: %v %v", got, err)
	}
	exc, err := ts.c.Query.ListExceptions(ctx, &arbiterv1.ListExceptionsRequest{Policy: "old-configmaps"})
	if err != nil || len(exc.GetExceptions()) != 1 || !exc.GetExceptions()[0].GetPolicies()[0].GetExists() {
		t.Fatalf("ListExceptions: %v %v", exc, err)
	}
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default","labels":{"cleanup":"y"}}}`),
		Operation: arbiterv1.Operation_OPERATION_CREATE})
	if err != nil || !resp.GetAllowed() || len(resp.GetResults()) != 0 {
		t.Fatalf("admission: %v %v", resp, err)
	}
}
