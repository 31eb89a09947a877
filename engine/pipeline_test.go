package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

func compileYAML(tb testing.TB, docs string) *engine.PolicySet {
	tb.Helper()
	parsed, err := manifest.Parse("test.yaml", []byte(docs))
	if err != nil {
		tb.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(parsed), engine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}

// expensivePolicy burns its whole CEL cost budget: each validation runs a
// nested comprehension over the object's data up to the per-expression
// limit.
func expensivePolicy(name string) string {
	return fmt.Sprintf(`apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: %s
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [configmaps]
  validations:
`, name) + strings.Repeat(`    - expression: "object.data.all(a, va, object.data.all(b, vb, object.data.all(c, vc, size(a + b + c) > 0)))"
`, 12) + "---\n"
}

func bigConfigMap() map[string]any {
	data := map[string]any{}
	for i := range 400 {
		data[fmt.Sprintf("key-%03d", i)] = "v"
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "big", "namespace": "default"}, "data": data}
}

// TestEvaluateStopsWhenContextIsDone: a decision whose context is done stops
// evaluating — inside an expensive expression (cel-go's interrupt check in
// comprehensions) and between policies — and reports every policy it did
// not finish as an error naming the cause; the same policies without a
// deadline run to their cost limits.
func TestEvaluateStopsWhenContextIsDone(t *testing.T) {
	set := func(n int) *engine.PolicySet {
		var docs strings.Builder
		for i := range n {
			docs.WriteString(expensivePolicy(fmt.Sprintf("expensive-%02d", i)))
		}
		return compileYAML(t, docs.String())
	}
	req := &admission.Request{Object: bigConfigMap()}
	req.Fill()

	full := set(1).Evaluate(context.Background(), req, nil)
	if len(full.Results) != 1 {
		t.Fatalf("%d results, want 1", len(full.Results))
	}
	for _, r := range full.Results {
		if r.Result != outcome.Error || !strings.Contains(r.Message, "cost") {
			t.Fatalf("without a deadline, %s: %s %q, want a cost limit error", r.Policy, r.Result, r.Message)
		}
	}

	const n = 8
	ps := set(n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	d := ps.Evaluate(ctx, req, nil)
	if len(d.Results) != n || d.Allowed {
		t.Fatalf("with a deadline: allowed %v, %d results", d.Allowed, len(d.Results))
	}
	stopped := 0
	for i, r := range d.Results {
		if strings.Contains(r.Message, "evaluation stopped: context deadline exceeded") {
			stopped++
			continue
		}
		if stopped > 0 {
			t.Fatalf("result %d (%s) after a stopped one: %s %q", i, r.Policy, r.Result, r.Message)
		}
	}
	if stopped < n/2 {
		t.Fatalf("only %d of %d policies stopped by the deadline", stopped, n)
	}
	last := d.Results[n-1]
	if last.Result != outcome.Error || last.Cause != outcome.CauseEvaluation || !strings.Contains(last.Message, "the policy was not evaluated") {
		t.Fatalf("last result: %s %v %q", last.Result, last.Cause, last.Message)
	}
}

const nsSelectorPolicies = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: prod-labels
spec:
  matchConstraints:
    namespaceSelector:
      matchLabels: {env: prod}
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [configmaps]
  validations:
    - expression: "has(object.metadata.labels)"
      message: labels required
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-bad-data
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [configmaps]
  validations:
    - expression: "!has(object.data) || !('bad' in object.data)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-bad-data
spec:
  policyName: no-bad-data
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-bad-data-staging
spec:
  policyName: no-bad-data
  validationActions: [Warn]
  matchResources:
    namespaceSelector:
      matchLabels: {env: staging}
`

// TestApplicableMatchesAsEvaluate: Applicable selects the policies Evaluate
// evaluates, with the same matchers: a Kyverno policy whose
// namespaceSelector cannot be decided (the request carries another
// Namespace) is reported with its match error, as Evaluate reports an
// error result; ValidatingAdmissionPolicies are listed with the bindings
// that match.
func TestApplicableMatchesAsEvaluate(t *testing.T) {
	ps := compileYAML(t, nsSelectorPolicies)
	cm := func(ns string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": ns}}
	}
	namespace := func(name, env string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "labels": map[string]any{"env": env}}}
	}
	for _, c := range []struct {
		name      string
		ns        map[string]any
		namespace string
		want      []string // kind/name[: match error][ bindings]
		results   []string // policy result
	}{
		{"prod namespace", namespace("p", "prod"), "p",
			[]string{"ValidatingPolicy/prod-labels", "ValidatingAdmissionPolicy/no-bad-data [no-bad-data]"},
			[]string{"prod-labels fail", "no-bad-data pass"}},
		{"staging namespace", namespace("s", "staging"), "s",
			[]string{"ValidatingAdmissionPolicy/no-bad-data [no-bad-data no-bad-data-staging]"},
			[]string{"no-bad-data pass", "no-bad-data pass"}},
		{"namespace object of another namespace", namespace("other", "prod"), "p",
			[]string{"ValidatingPolicy/prod-labels: failed to execute matching: namespaces \"p\" not found", "ValidatingAdmissionPolicy/no-bad-data [no-bad-data]"},
			[]string{"prod-labels error", "no-bad-data pass"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := &admission.Request{Object: cm(c.namespace), NamespaceObject: c.ns}
			req.Fill()
			var got []string
			for _, a := range ps.Applicable(context.Background(), req, true, nil) {
				s := a.Kind + "/" + a.Name
				if a.MatchError != "" {
					s += ": " + a.MatchError
				}
				if a.VAP != nil {
					s += " [" + strings.Join(a.VAP.Bindings, " ") + "]"
				}
				got = append(got, s)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("applicable:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			var results []string
			for _, r := range ps.Evaluate(context.Background(), req, nil).Results {
				results = append(results, r.Policy+" "+r.Result)
			}
			if strings.Join(results, "\n") != strings.Join(c.results, "\n") {
				t.Errorf("results:\n%s\nwant:\n%s", strings.Join(results, "\n"), strings.Join(c.results, "\n"))
			}
		})
	}
}
