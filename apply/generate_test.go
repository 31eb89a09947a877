package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const generatingPolicy = `apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata:
  name: default-deny
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["namespaces"]
  generate:
  - expression: >-
      generator.Apply(object.metadata.name, [{
        "apiVersion": dyn("networking.k8s.io/v1"), "kind": dyn("NetworkPolicy"),
        "metadata": dyn({"name": "default-deny"}),
        "spec": dyn({"podSelector": dyn({})})
      }])
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata:
  name: system
spec:
  policyRefs:
  - {name: default-deny, kind: GeneratingPolicy}
  matchConditions:
  - {name: system, expression: "object.metadata.name == 'kube-system'"}
`

const generatingResources = `apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: v1
kind: Namespace
metadata:
  name: kube-system
`

// TestApplyGenerating: arbiter apply evaluates GeneratingPolicies on the
// resources: the table names what each one generates, -o yaml and -o json
// give the generated objects before the resource's report, and an
// exception's skip generates nothing.
func TestApplyGenerating(t *testing.T) {
	dir := t.TempDir()
	pol, res := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "namespaces.yaml")
	if err := os.WriteFile(pol, []byte(generatingPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(res, []byte(generatingResources), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(format string) string {
		var out, stderr bytes.Buffer
		err := Run(context.Background(), &out, Options{Paths: []string{pol}, Resources: []string{res}, Output: format, Progress: "never", Stderr: &stderr})
		if err != nil {
			t.Fatalf("-o %s: %v (%s)", format, err, stderr.String())
		}
		return out.String()
	}
	table := run("table")
	for _, want := range []string{
		"Namespace team-a      default-deny            pass    generated NetworkPolicy team-a/default-deny",
		"Namespace kube-system  default-deny/exception  skip    rule is skipped due to policy exception: system",
		"2 resources: 1 pass, 0 fail, 0 warn, 0 error, 1 skip",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	yml := run("yaml")
	want := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: default-deny\n  namespace: team-a\nspec:\n  podSelector: {}\n---\napiVersion: wgpolicyk8s.io/v1alpha2\nkind: ClusterPolicyReport\n"
	if !strings.HasPrefix(yml, want) {
		t.Errorf("-o yaml does not start with the generated object then the report:\n%s", yml)
	}
	if !strings.Contains(strings.Join(strings.Fields(yml), " "), "generated-resources: networking.k8s.io/v1, Kind=NetworkPolicy Name=default-deny Namespace=team-a") {
		t.Errorf("-o yaml: no generated-resources property:\n%s", yml)
	}
	if n := strings.Count(yml, "kind: NetworkPolicy"); n != 1 {
		t.Errorf("-o yaml: %d NetworkPolicies, want 1 (none for the exempted Namespace)", n)
	}
	var docs []map[string]any
	if err := json.Unmarshal([]byte(run("json")), &docs); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d["kind"].(string))
	}
	if got := strings.Join(kinds, ","); got != "NetworkPolicy,ClusterPolicyReport,ClusterPolicyReport" {
		t.Errorf("-o json: documents %s", got)
	}
}
