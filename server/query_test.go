package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

var update = flag.Bool("update", false, "rewrite golden files")

func pod(name string, labels, annotations map[string]any) []byte {
	md := map[string]any{"name": name, "namespace": "apps"}
	if labels != nil {
		md["labels"] = labels
	}
	if annotations != nil {
		md["annotations"] = annotations
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}})
	return b
}

func inventoryServer(t *testing.T) *testServer {
	ts := startServer(t, server.Config{})
	if _, err := ts.LoadObjects(context.Background(), readObjects(t, "testdata/inventory.yaml")); err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestListAndGetPolicies(t *testing.T) {
	ts := inventoryServer(t)
	ctx := context.Background()
	names := func(r *arbiterv1.ListPoliciesResponse) string {
		var n []string
		for _, p := range r.GetPolicies() {
			n = append(n, p.GetName())
		}
		return strings.Join(n, ",")
	}
	for _, c := range []struct {
		req  *arbiterv1.ListPoliciesRequest
		want string
	}{
		{&arbiterv1.ListPoliciesRequest{}, "audit-images,require-team"},
		{&arbiterv1.ListPoliciesRequest{Action: "Deny"}, "require-team"},
		{&arbiterv1.ListPoliciesRequest{LabelSelector: "owner=security"}, "audit-images"},
		{&arbiterv1.ListPoliciesRequest{Kind: "NamespacedValidatingPolicy"}, ""},
	} {
		resp, err := ts.c.Query.ListPolicies(ctx, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(resp); got != c.want || resp.GetRevision() != 1 {
			t.Errorf("%v: %q at %d, want %q at 1", c.req, got, resp.GetRevision(), c.want)
		}
	}
	resp, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Action: "Deny"})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.GetPolicies()[0]
	if res := strings.Join(p.GetResources(), ","); !strings.HasPrefix(res, "v1/pods,") || !strings.Contains(res, "apps/v1/deployments") || strings.Join(p.GetExceptions(), ",") != "exc/legacy,exc/reviewed" ||
		!strings.Contains(string(p.GetManifestJson()), `"require-team"`) || len(p.GetAutogen()) != 2 {
		t.Fatalf("policy info: %v", p)
	}
	if _, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{LabelSelector: "a in (("}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad selector: %v", err)
	}
	got, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Name: "require-team"})
	if err != nil || len(got.GetExceptions()) != 2 || got.GetPolicy().GetName() != "require-team" {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing policy: %v", err)
	}
}

func TestListExceptions(t *testing.T) {
	ts := inventoryServer(t)
	ctx := context.Background()
	yes, no := true, false
	for _, c := range []struct {
		req  *arbiterv1.ListExceptionsRequest
		want string
	}{
		{&arbiterv1.ListExceptionsRequest{}, "legacy,reviewed"},
		{&arbiterv1.ListExceptionsRequest{Policy: "gone"}, "reviewed"},
		{&arbiterv1.ListExceptionsRequest{HasControls: &yes}, "reviewed"},
		{&arbiterv1.ListExceptionsRequest{HasControls: &no}, "legacy"},
		{&arbiterv1.ListExceptionsRequest{ExpiringBefore: timestamppb.New(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))}, "legacy"},
		{&arbiterv1.ListExceptionsRequest{ExpiringBefore: timestamppb.New(time.Date(2098, 1, 1, 0, 0, 0, 0, time.UTC))}, ""},
		{&arbiterv1.ListExceptionsRequest{Namespace: "other"}, ""},
	} {
		resp, err := ts.c.Query.ListExceptions(ctx, c.req)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, e := range resp.GetExceptions() {
			n = append(n, e.GetName())
		}
		if got := strings.Join(n, ","); got != c.want {
			t.Errorf("%v: %q, want %q", c.req, got, c.want)
		}
	}
	resp, _ := ts.c.Query.ListExceptions(ctx, &arbiterv1.ListExceptionsRequest{Policy: "gone"})
	refs := resp.GetExceptions()[0].GetPolicies()
	if len(refs) != 2 || !refs[0].GetExists() || refs[1].GetExists() || refs[1].GetName() != "gone" {
		t.Fatalf("references: %v", refs)
	}
}

func TestApplicable(t *testing.T) {
	ts := inventoryServer(t)
	ctx := context.Background()
	resp, err := ts.c.Query.Applicable(ctx, &arbiterv1.ApplicableRequest{ObjectJson: pod("legacy-web", nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetPolicies()) != 1 || resp.GetPolicies()[0].GetPolicy().GetName() != "require-team" {
		t.Fatalf("applicable: %v", resp)
	}
	matches := map[string]string{}
	for _, e := range resp.GetPolicies()[0].GetExceptions() {
		matches[e.GetException().GetName()] = e.GetMatch()
	}
	if matches["legacy"] != "matches" || matches["reviewed"] != "does not match" {
		t.Fatalf("exception matches: %v", matches)
	}
	// By kind and labels: a Deployment matches the autogen variant of
	// require-team and audit-images; exceptions are not evaluated.
	resp, err = ts.c.Query.Applicable(ctx, &arbiterv1.ApplicableRequest{
		Kind: &arbiterv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "apps", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range resp.GetPolicies() {
		got = append(got, p.GetPolicy().GetName()+":"+p.GetVariant())
		for _, e := range p.GetExceptions() {
			if e.GetMatch() != "not evaluated" {
				t.Errorf("exception evaluated without an object: %v", e)
			}
		}
	}
	if strings.Join(got, ",") != "audit-images:,require-team:defaults" {
		t.Fatalf("by kind: %v", got)
	}
}

// Explain golden outputs: a passing, a failing, an exempted and a
// refused-exception decision.
func TestExplainGolden(t *testing.T) {
	ts := inventoryServer(t)
	ctx := context.Background()
	cases := map[string][]byte{
		"pass":              pod("web", map[string]any{"team": "a"}, nil),
		"fail":              pod("web", nil, nil),
		"exempted":          pod("legacy-web", nil, nil),
		"refused-exception": pod("reviewed-web", nil, nil),
	}
	for name, obj := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := ts.c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: obj}})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			d := resp.GetDecision()
			fmt.Fprintf(&b, "allowed: %v\nmessage: %s\n", d.GetAllowed(), d.GetStatus().GetMessage())
			for _, s := range resp.GetSteps() {
				fmt.Fprintf(&b, "%s|%s|%s|%s|%s|%s|%s|%s\n", s.GetPolicy(), s.GetPhase(), s.GetName(), s.GetException(),
					s.GetExpression(), s.GetValue(), s.GetError(), s.GetNote())
			}
			file := filepath.Join("testdata/explain", name+".txt")
			if *update {
				if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if b.String() != string(want) {
				t.Fatalf("explain differs from %s:\n--- got\n%s--- want\n%s", file, b.String(), want)
			}
		})
	}
}
