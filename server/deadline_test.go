package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// expensivePolicies are n ValidatingPolicies on ConfigMaps that each burn
// their whole CEL cost budget on a large ConfigMap.
func expensivePolicies(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: expensive-%02d
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [configmaps]
  validations:
`, i)
		for range 12 {
			b.WriteString(`    - expression: "object.data.all(a, va, object.data.all(b, vb, object.data.all(c, vc, size(a + b + c) > 0)))"` + "\n")
		}
		b.WriteString("---\n")
	}
	return b.String()
}

// TestDecideDeadlineStopsEvaluation: a Decide whose deadline passes gets
// DEADLINE_EXCEEDED, and the server stops evaluating it — the decision it
// logs reports the policies it did not evaluate as stopped, rather than
// burning every policy's cost budget after the caller has gone.
func TestDecideDeadlineStopsEvaluation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	dl, err := decisionlog.New(decisionlog.Config{Output: path})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{DecisionLog: dl})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, expensivePolicies(8)))); err != nil {
		t.Fatal(err)
	}
	data := map[string]any{}
	for i := range 400 {
		data[fmt.Sprintf("key-%03d", i)] = "v"
	}
	cm, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "big", "namespace": "default"}, "data": data})

	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = ts.c.Decide(dctx, &arbiterv1.DecideRequest{ObjectJson: cm})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Decide: %v, want DeadlineExceeded", err)
	}
	for dl.Written() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 1 {
		t.Fatalf("%d decisions logged, want 1", len(lines))
	}
	results := lines[0]["results"].([]any)
	if len(results) != 8 {
		t.Fatalf("%d results, want 8", len(results))
	}
	last := results[len(results)-1].(map[string]any)
	if msg, _ := last["message"].(string); !strings.Contains(msg, "evaluation stopped: context ") {
		t.Fatalf("last result: %v", last)
	}
}
