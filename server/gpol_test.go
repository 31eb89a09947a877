package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

const generatingPolicy = `{"apiVersion":"policies.kyverno.io/v1","kind":"GeneratingPolicy","metadata":{"name":"default-deny"},
"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["namespaces"]}]},
 "generate":[{"expression":"generator.Apply(object.metadata.name, [])"}]}}`

// A server refuses GeneratingPolicies, saying they are evaluated offline
// only (it does not create what they generate in the cluster); nothing of
// the write is committed.
func TestGeneratingPolicyRefused(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	_, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: []byte(generatingPolicy)},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("code %v, want InvalidArgument", status.Code(err))
	}
	if err == nil || !strings.Contains(err.Error(), "GeneratingPolicy default-deny: spec.generate: a GeneratingPolicy is evaluated offline only (arbiter test, arbiter apply)") {
		t.Fatalf("writing a GeneratingPolicy: %v", err)
	}
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
	if err != nil || len(list.GetPolicies()) != 0 {
		t.Fatalf("ListPolicies: %v %v", list.GetPolicies(), err)
	}
}
